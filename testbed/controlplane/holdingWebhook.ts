// A validating admission webhook for widgets/status that admits every write
// at once, except one a test asked it to hold: that write stays in flight in
// the apiserver (its handler waits on the webhook) until the test releases
// it. Production has the same window whenever a webhook is slow; here the
// test knows the write is in flight the moment the webhook receives it, and
// injects its fault then — a concurrent writer, a reset connection, a killed
// apiserver — instead of sleeping and hoping.
//
// The same server can be registered again under another name, scoped to the
// widgets an object selector picks, with a timeout of its own (`install`
// with options): a write held there past that timeout is the slow webhook of
// production, whose timeout the apiserver answers with its own error. Each
// registration has its own URL path, and a hold names the registration it is
// for, so a write both call is held by one and admitted by the other.
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
  /** Which registration the apiserver called (its webhook name), from the URL path; not part of the review. */
  webhook: string;
}

export interface WebhookRegistration {
  /** The webhook's and its ValidatingWebhookConfiguration's name (default WEBHOOK_NAME). */
  name?: string;
  /** How long the apiserver waits for an answer (1–30 s; default 30). */
  timeoutSeconds?: number;
  /** Only the widgets whose labels match (default: every widget). */
  objectSelector?: { matchLabels: Record<string, string> };
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
  /** Holds the next status write to namespace/name (by `user`, when given) that registration `webhook` (default WEBHOOK_NAME) is called for. */
  hold(match: { namespace: string; name: string; user?: string; webhook?: string }): Hold;
  /**
   * Registers the webhook with the apiserver (once per name) and waits until
   * the apiserver calls it: a status write to a probe widget in `default`
   * (labelled to match the object selector), repeated until it arrives.
   */
  install(cp: ControlPlane, registration?: WebhookRegistration): Promise<void>;
  /** Deletes a registration install() made. */
  uninstall(cp: ControlPlane, name: string): Promise<void>;
  close(): Promise<void>;
}

const WEBHOOK_NAME = "hold.widgets.demo.lostwrite.dev";

interface Pending {
  match: { namespace: string; name: string; user?: string; webhook: string };
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
      const review = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { request: Omit<AdmissionRequest, "webhook"> };
      const request: AdmissionRequest = { ...review.request, webhook: webhookOfPath(req.url ?? "") };
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
      const held = pending.findIndex((p) => p.match.webhook === request.webhook && p.match.namespace === request.namespace && p.match.name === request.name &&
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
  const urlOf = (name: string): string => (name === WEBHOOK_NAME ? url : `${url}/${name}`);

  return {
    url,
    seen,
    hold(match) {
      let arrived!: (request: AdmissionRequest) => void;
      const promise = new Promise<AdmissionRequest>((resolve) => (arrived = resolve));
      const p: Pending = { match: { ...match, webhook: match.webhook ?? WEBHOOK_NAME }, arrived, answer: null, released: null };
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
    async install(target, registration = {}) {
      const name = registration.name ?? WEBHOOK_NAME;
      const labels = registration.objectSelector?.matchLabels ?? {};
      await target.create("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingWebhookConfiguration",
        metadata: { name },
        webhooks: [{
          name,
          clientConfig: { url: urlOf(name), caBundle: Buffer.from(target.caPem).toString("base64") },
          rules: [{ apiGroups: [WIDGET_GROUP], apiVersions: [WIDGET_VERSION], operations: ["UPDATE"], resources: ["widgets/status"], scope: "Namespaced" }],
          ...(registration.objectSelector ? { objectSelector: registration.objectSelector } : {}),
          failurePolicy: "Fail",
          sideEffects: "None",
          admissionReviewVersions: ["v1"],
          timeoutSeconds: registration.timeoutSeconds ?? 30,
        }],
      });
      // The apiserver calls a new webhook once its informer has seen the configuration:
      // a status write to a probe widget, repeated until the webhook receives it.
      const probe = `probe-${name.split(".")[0]}`;
      await target.create(`/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/default/widgets`, {
        apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name: probe, labels }, spec: { size: 0 },
      });
      const deadline = Date.now() + 30_000;
      for (let i = 0; !seen.some((r) => r.name === probe && r.webhook === name); i++) {
        if (Date.now() > deadline) throw new Error(`the apiserver never called webhook ${name}`);
        await target.request("PATCH", `/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/default/widgets/${probe}/status`, {
          body: { status: { observedGeneration: i } }, contentType: "application/merge-patch+json",
        });
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    async uninstall(target, name) {
      const res = await target.request("DELETE", `/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/${name}`);
      if (res.status !== 200) throw new Error(`DELETE ValidatingWebhookConfiguration ${name}: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async close() {
      for (const p of pending.splice(0)) p.answer?.(true);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The registration a request came for, from the URL path it was sent to (`/validate` or `/validate/<name>`). */
function webhookOfPath(urlPath: string): string {
  const rest = urlPath.split("?")[0]!.replace(/^\/validate\/?/, "");
  return rest === "" ? WEBHOOK_NAME : decodeURIComponent(rest);
}
