// A validating admission webhook for widgets/status that admits every write
// at once, except one a test asked it to hold: that write stays in flight in
// the apiserver (its handler waits on the webhook) until the test releases
// it. Production has the same window whenever a webhook is slow; here the
// test knows the write is in flight the moment the webhook receives it, and
// injects its fault then — a concurrent writer, a reset connection, a killed
// apiserver — instead of sleeping and hoping.
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { ControlPlane } from "./controlPlane.ts";
import { WIDGET_GROUP, WIDGET_VERSION } from "./widgets.ts";

export interface AdmissionRequest {
  uid: string;
  operation: string;
  namespace?: string;
  name?: string;
  subResource?: string;
  userInfo?: { username?: string; groups?: string[] };
}

export interface Hold {
  /** Resolves with the held write's admission request once the apiserver sent it: the write is in flight. */
  arrived: Promise<AdmissionRequest>;
  /** Answers the held write (allowed, or denied with a message); safe to call twice. */
  release(allowed?: boolean): void;
}

export interface HoldingWebhook {
  url: string;
  /** Every admission request received, in order. */
  seen: AdmissionRequest[];
  /** Holds the next status write to namespace/name (by `user`, when given). */
  hold(match: { namespace: string; name: string; user?: string }): Hold;
  /** Registers the webhook with the apiserver and waits until the apiserver calls it. */
  install(cp: ControlPlane): Promise<void>;
  close(): Promise<void>;
}

const WEBHOOK_NAME = "hold.widgets.demo.lostwrite.dev";

interface Pending {
  match: { namespace: string; name: string; user?: string };
  arrived: (request: AdmissionRequest) => void;
  answer: ((allowed: boolean) => void) | null;
  released: boolean | null;
}

/** Serves on 127.0.0.1 with the control plane's serving certificate (its CA is the webhook's caBundle). */
export async function startHoldingWebhook(cp: Pick<ControlPlane, "serving">): Promise<HoldingWebhook> {
  const seen: AdmissionRequest[] = [];
  const pending: Pending[] = [];
  const server = https.createServer({ cert: cp.serving.certPem, key: cp.serving.keyPem }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const review = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { request: AdmissionRequest };
      const request = review.request;
      seen.push(request);
      const respond = (allowed: boolean): void => {
        if (res.destroyed) return;
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({
          apiVersion: "admission.k8s.io/v1",
          kind: "AdmissionReview",
          response: { uid: request.uid, allowed, ...(allowed ? {} : { status: { code: 403, message: "denied by the holding webhook" } }) },
        }));
      };
      const held = pending.findIndex((p) => p.match.namespace === request.namespace && p.match.name === request.name &&
        (p.match.user === undefined || p.match.user === request.userInfo?.username));
      if (held === -1) return respond(true);
      const [p] = pending.splice(held, 1);
      if (p!.released !== null) return respond(p!.released);
      p!.answer = respond;
      p!.arrived(request);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/validate`;

  return {
    url,
    seen,
    hold(match) {
      let arrived!: (request: AdmissionRequest) => void;
      const promise = new Promise<AdmissionRequest>((resolve) => (arrived = resolve));
      const p: Pending = { match, arrived, answer: null, released: null };
      pending.push(p);
      return {
        arrived: promise,
        release(allowed = true) {
          if (p.released !== null) return;
          p.released = allowed;
          p.answer?.(allowed);
        },
      };
    },
    async install(target) {
      await target.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingWebhookConfiguration",
        metadata: { name: WEBHOOK_NAME },
        webhooks: [{
          name: WEBHOOK_NAME,
          clientConfig: { url, caBundle: Buffer.from(target.caPem).toString("base64") },
          rules: [{ apiGroups: [WIDGET_GROUP], apiVersions: [WIDGET_VERSION], operations: ["UPDATE"], resources: ["widgets/status"], scope: "Namespaced" }],
          failurePolicy: "Fail",
          sideEffects: "None",
          admissionReviewVersions: ["v1"],
          timeoutSeconds: 30,
        }],
      });
      // The apiserver calls a new webhook once its informer has seen the configuration:
      // a status write to a probe widget, repeated until the webhook receives it.
      await target.create(`/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/default/widgets`, {
        apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name: "webhook-probe" }, spec: { size: 0 },
      });
      const deadline = Date.now() + 30_000;
      for (let i = 0; !seen.some((r) => r.name === "webhook-probe"); i++) {
        if (Date.now() > deadline) throw new Error("the apiserver never called the holding webhook");
        await target.request("PATCH", `/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/default/widgets/webhook-probe/status`, {
          body: { status: { observedGeneration: i } }, contentType: "application/merge-patch+json",
        });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    async close() {
      for (const p of pending.splice(0)) p.answer?.(true);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
