// The parts of Kubernetes objects discovery reads, validated. Objects from the
// apiserver are input from outside: a pod that does not parse is skipped and
// counted, never allowed to throw into the watch. Parsing also strips every
// field not listed here, so the watch cache holds small objects only.
import { isIP } from "node:net";
import { z } from "zod";

const stringMap = z.record(z.string(), z.string());

const ObjectMetaSchema = z.object({
  name: z.string().min(1),
  namespace: z.string().min(1),
  uid: z.string().optional(),
  resourceVersion: z.string().optional(),
  labels: stringMap.nullish(),
  annotations: stringMap.nullish(),
  ownerReferences: z
    .array(z.object({ kind: z.string(), name: z.string(), controller: z.boolean().nullish() }))
    .nullish(),
});

// A pod's addresses decide whose spans a sender's are (sources/spans/senderTrust.ts),
// so an address that is not an IP makes the pod invalid rather than unmatched.
const ipAddress = z.string().refine((value) => isIP(value) !== 0, "not an IP address");
const addressList = z.array(z.object({ ip: ipAddress })).nullish();

const ContainerStatusSchema = z.object({
  name: z.string().min(1),
  // Empty or absent until the runtime has created the container.
  containerID: z.string().nullish(),
});

export const PodSchema = z.object({
  metadata: ObjectMetaSchema,
  spec: z.object({
    nodeName: z.string().nullish(),
    containers: z.array(z.object({ name: z.string().min(1) })),
    // A host-network pod's addresses are the node's: they name no pod.
    hostNetwork: z.boolean().nullish(),
  }),
  status: z
    .object({
      phase: z.string().nullish(),
      containerStatuses: z.array(ContainerStatusSchema).nullish(),
      // Native sidecars (restartPolicy: Always init containers) run next to the main ones.
      initContainerStatuses: z.array(ContainerStatusSchema).nullish(),
      // podIPs (dual-stack) lists podIP first; older apiservers send podIP alone.
      podIP: ipAddress.nullish(),
      podIPs: addressList,
      hostIP: ipAddress.nullish(),
      hostIPs: addressList,
    })
    .nullish(),
});
export type Pod = z.infer<typeof PodSchema>;

export const EndpointSliceSchema = z.object({
  metadata: z.object({
    name: z.string().min(1),
    namespace: z.string().min(1),
    resourceVersion: z.string().optional(),
  }),
  addressType: z.string(),
  endpoints: z.array(z.object({ addresses: z.array(z.string()) })).nullish(),
  ports: z
    .array(z.object({ name: z.string().nullish(), port: z.number().int().min(1).max(65535).nullish() }))
    .nullish(),
});
export type EndpointSlice = z.infer<typeof EndpointSliceSchema>;

/** Where a validation failed, quoting the path and the message, for a log line. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
    .join("; ");
}
