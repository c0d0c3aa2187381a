// OTLP/gRPC trace receiver: TraceService/Export over HTTP/2 (port 4317), for
// operators whose exporter speaks gRPC (Go's otlptracegrpc as often as not).
// The request message is the same ExportTraceServiceRequest as the OTLP/HTTP
// protobuf body, so everything after reading it is the HTTP receiver's
// (spanIntake.ts): the same limits, the same rejection reasons, counted in
// the same metric, the same forwarding. The answer is an
// ExportTraceServiceResponse, with partial_success when some spans were
// refused; refusals map to the status codes the OTLP specification gives
// (UNAVAILABLE is the one exporters retry). Any other method is UNIMPLEMENTED.
//
// The agent accepts the TCP connections itself and hands them to grpc-js
// (its connection injector): the intake must see each connection, to learn
// which process is at its other end, and grpc-js shows a call only its
// peer's address text.
import net from "node:net";
import * as grpc from "@grpc/grpc-js";
import { formatHostPort, parseHostPort } from "../../hostPort.ts";
import type { SpanRejectReason } from "../../telemetry/metrics.ts";
import type { OtlpReceiver } from "./otlpReceiver.ts";
import { encodeProtobufTraceResponse } from "./otlpProtobuf.ts";
import type { SpanIntake } from "./spanIntake.ts";

interface OtlpGrpcReceiverOptions {
  /** host:port ("[::1]:4317" for IPv6); port 0 picks a free one. */
  listen: string;
  /** Limit on a request message, both as sent and after grpc-encoding. */
  maxBodyBytes: number;
  /** Judges, counts, hands on and forwards what was read (shared with the HTTP receiver). */
  intake: SpanIntake;
  /** Calls admitted at once; more are answered UNAVAILABLE. Bounds memory to about this × maxBodyBytes. */
  maxConcurrentRequests?: number;
  /** A call that has not ended this long after it began is ended, so slow clients cannot hold a slot. */
  callTimeoutMs?: number;
}

export const EXPORT_PATH = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

const STATUS: Record<SpanRejectReason, grpc.status> = {
  malformed: grpc.status.INVALID_ARGUMENT,
  unsupported_media_type: grpc.status.UNIMPLEMENTED,
  too_large: grpc.status.RESOURCE_EXHAUSTED,
  queue_full: grpc.status.UNAVAILABLE,
  method_not_allowed: grpc.status.UNIMPLEMENTED,
  unknown_sender: grpc.status.PERMISSION_DENIED,
  sender_mismatch: grpc.status.PERMISSION_DENIED,
  senders_not_listed: grpc.status.UNAVAILABLE,
};

/**
 * Statuses grpc-js sends by itself, before the handler sees a message: a
 * message over the size limit (as sent or inflated), one that does not
 * inflate, a grpc-encoding it does not know.
 */
const LIBRARY_REFUSALS = new Map<grpc.status, SpanRejectReason>([
  [grpc.status.RESOURCE_EXHAUSTED, "too_large"],
  [grpc.status.INTERNAL, "malformed"],
  [grpc.status.UNIMPLEMENTED, "unsupported_media_type"],
]);

// The message is kept as bytes here and decoded by the intake, where a
// malformed one is answered INVALID_ARGUMENT and counted like an HTTP body.
const traceService: grpc.ServiceDefinition = {
  Export: {
    path: EXPORT_PATH,
    requestStream: false,
    responseStream: false,
    requestSerialize: (message: Buffer) => message,
    requestDeserialize: (bytes: Buffer) => bytes,
    responseSerialize: (message: Uint8Array) => Buffer.from(message),
    responseDeserialize: (bytes: Buffer) => bytes,
  },
};

export async function startOtlpGrpcReceiver(opts: OtlpGrpcReceiverOptions): Promise<OtlpReceiver> {
  const { host, port } = parseHostPort(opts.listen, "otlpGrpcListen");
  if (!(Number.isSafeInteger(opts.maxBodyBytes) && opts.maxBodyBytes > 0)) {
    throw new Error(`otlp grpc maxBodyBytes: expected a positive integer, got ${opts.maxBodyBytes}`);
  }
  const { intake } = opts;
  const maxConcurrent = opts.maxConcurrentRequests ?? 8;
  const callTimeoutMs = opts.callTimeoutMs ?? 30_000;
  let inFlight = 0;

  const admission: grpc.ServerInterceptor = (_method, call) => {
    let admitted = false;
    let ended = false;
    let answeredByHandler = false;
    let timer: NodeJS.Timeout | undefined;
    const end = (): void => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      if (admitted) inFlight--;
    };
    // grpc-js refuses oversized and undecodable messages itself, on the call
    // it hands the first interceptor, by calling that call's own sendStatus:
    // wrapping it there is the one place such a refusal can be counted.
    const sendStatus = call.sendStatus.bind(call);
    call.sendStatus = (status) => {
      if (!ended && !answeredByHandler) {
        const reason = LIBRARY_REFUSALS.get(status.code);
        if (reason !== undefined) intake.reject(reason);
      }
      end();
      sendStatus(status);
    };
    return new grpc.ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, pass) => {
            // Strangers are refused before their message is read, so they cannot hold the slots.
            const stranger = intake.screen(peerAddress(call.getPeer()));
            if (stranger !== null) {
              call.sendStatus({ code: STATUS[stranger.reason], details: stranger.detail });
              return;
            }
            if (inFlight >= maxConcurrent) {
              intake.reject("queue_full");
              call.sendStatus({ code: grpc.status.UNAVAILABLE, details: "too many concurrent requests" });
              return;
            }
            inFlight++;
            admitted = true;
            timer = setTimeout(() => call.sendStatus({ code: grpc.status.DEADLINE_EXCEEDED, details: "request not received in time" }), callTimeoutMs);
            timer.unref();
            pass(metadata);
          },
          onCancel: end,
        });
      },
      sendStatus: (status, pass) => {
        answeredByHandler = true;
        pass(status);
      },
    });
  };

  const server = new grpc.Server({
    "grpc.max_receive_message_length": opts.maxBodyBytes,
    interceptors: [admission],
  });
  server.addService(traceService, {
    Export: (call: grpc.ServerUnaryCall<Buffer, Uint8Array>, callback: grpc.sendUnaryData<Uint8Array>) => {
      const peer = call.getPeer();
      intake
        .take({
          mediaType: "application/x-protobuf",
          decoded: call.request,
          // Forwarded as OTLP/HTTP protobuf: the message is that body, inflated.
          forward: { body: call.request, contentType: "application/x-protobuf", contentEncoding: null },
          peer: peerAddress(peer),
          peerPort: peerPort(peer),
        })
        .then(
          (verdict) => {
            if (!verdict.ok) callback({ code: STATUS[verdict.reason], details: verdict.detail });
            else callback(null, encodeProtobufTraceResponse(verdict.partial));
          },
          (err: unknown) => {
            // Only a bug of ours gets here; answer and keep serving.
            callback({ code: grpc.status.INTERNAL, details: "internal error" });
            process.emitWarning(`otlp grpc receiver: ${err instanceof Error ? err.message : String(err)}`);
          },
        );
    },
  });

  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const listener = net.createServer((socket) => {
    intake.track(socket);
    injector.injectConnection(socket);
  });
  const boundPort = await new Promise<number>((resolve, reject) => {
    const failed = (err: Error): void => reject(new Error(`otlpGrpcListen: cannot listen on ${formatHostPort(host, port)}: ${err.message}`));
    listener.once("error", failed);
    listener.listen(port, host, () => {
      listener.off("error", failed);
      resolve((listener.address() as net.AddressInfo).port);
    });
  });
  // An accept that failed (out of file descriptors) is the client's loss, not the agent's end.
  listener.on("error", (err) => process.emitWarning(`otlp grpc receiver: ${err.message}`));

  return {
    address: { host, port: boundPort },
    async close() {
      listener.close();
      await new Promise<void>((resolve) => {
        // Calls in progress get a moment to finish, then the connections are cut.
        const force = setTimeout(() => server.forceShutdown(), 2_000);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      injector.destroy();
    },
  };
}

/** The port of grpc-js's peer text; null when it has none. */
function peerPort(peer: string): number | null {
  const port = /:(\d+)$/.exec(peer)?.[1];
  return port === undefined ? null : Number(port);
}

/** The address of grpc-js's peer text, "ADDR:PORT" with an IPv6 ADDR unbracketed; null when it has none. */
export function peerAddress(peer: string): string | null {
  const cut = peer.lastIndexOf(":");
  if (cut <= 0 || !/^\d+$/.test(peer.slice(cut + 1))) return null;
  return peer.slice(0, cut).replace(/^\[(.*)\]$/, "$1");
}
