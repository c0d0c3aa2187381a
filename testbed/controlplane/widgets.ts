// What the control plane serves for the testbed operators: the Widget CRD
// (demo.lostwrite.dev/v1, namespaced, a status subresource, the fields
// testbed/cr-operator reads and writes) and the RBAC an operator's identity
// needs to reconcile widgets.
//
// The status schema is an older release's: its phase enum lists Pending,
// Ready and Failed, not Paused, which the operators write for a paused Widget.
// The apiserver rejects that status write with 422 (Unprocessable Entity) —
// an operator newer than the CRD installed beside it — and nothing else the
// operators write.

export const WIDGET_GROUP = "demo.lostwrite.dev";
export const WIDGET_VERSION = "v1";
/** The phases the CRD's status schema accepts. */
const WIDGET_PHASES = ["Pending", "Ready", "Failed"] as const;
/** The group every operator identity is in; the RBAC below binds it. */
export const OPERATOR_GROUP = "lostwrite:operators";

const condition = {
  type: "object",
  required: ["type", "status", "lastTransitionTime", "reason", "message"],
  properties: {
    type: { type: "string", maxLength: 316 },
    status: { type: "string", enum: ["True", "False", "Unknown"] },
    observedGeneration: { type: "integer", format: "int64", minimum: 0 },
    lastTransitionTime: { type: "string", format: "date-time" },
    reason: { type: "string", maxLength: 1024, minLength: 1 },
    message: { type: "string", maxLength: 32768 },
  },
};

export const widgetCrd = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: { name: `widgets.${WIDGET_GROUP}` },
  spec: {
    group: WIDGET_GROUP,
    scope: "Namespaced",
    names: { plural: "widgets", singular: "widget", kind: "Widget", listKind: "WidgetList" },
    versions: [{
      name: WIDGET_VERSION,
      served: true,
      storage: true,
      subresources: { status: {} },
      schema: {
        openAPIV3Schema: {
          type: "object",
          properties: {
            spec: {
              type: "object",
              properties: {
                size: { type: "integer", format: "int64", minimum: 0 },
                paused: { type: "boolean" },
              },
            },
            status: {
              type: "object",
              properties: {
                observedGeneration: { type: "integer", format: "int64", minimum: 0 },
                phase: { type: "string", enum: [...WIDGET_PHASES] },
                conditions: {
                  type: "array",
                  items: condition,
                  "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["type"],
                },
              },
            },
          },
        },
      },
    }],
  },
};

export const operatorClusterRole = {
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "ClusterRole",
  metadata: { name: "lostwrite-widget-operator" },
  rules: [
    { apiGroups: [WIDGET_GROUP], resources: ["widgets"], verbs: ["get", "list", "watch", "update", "patch"] },
    { apiGroups: [WIDGET_GROUP], resources: ["widgets/status"], verbs: ["get", "update", "patch"] },
    { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
  ],
};

export const operatorClusterRoleBinding = {
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "ClusterRoleBinding",
  metadata: { name: "lostwrite-widget-operator" },
  roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "lostwrite-widget-operator" },
  subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "Group", name: OPERATOR_GROUP }],
};
