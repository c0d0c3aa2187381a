// The socket probe's records on their way into the loss graph's queue. A
// process rejected at its exec is dropped here (targets/execAdmission.ts);
// socket activity of a process whose OpenSSL is still to be found prompts a
// look now (tls/tlsProbes.ts), while it runs.
import type { ExecAdmission } from "../targets/execAdmission.ts";
import type { ProbeRecord } from "./probeOutput.ts";

export class ProbeRecordRoute {
  readonly #admission: Pick<ExecAdmission, "admit">;
  readonly #tls: { lookNow(pid: number): void } | null;
  readonly #queue: { push(record: ProbeRecord): boolean };

  constructor(admission: Pick<ExecAdmission, "admit">, tls: { lookNow(pid: number): void } | null, queue: { push(record: ProbeRecord): boolean }) {
    this.#admission = admission;
    this.#tls = tls;
    this.#queue = queue;
  }

  /** False: dropped as no target's, and not recorded either. An arrow property: the probe is handed it as it is. */
  readonly take = (record: ProbeRecord): boolean => {
    if (!this.#admission.admit(record)) return false;
    if (this.#tls && (record.type === "close" || record.type === "ambiguous" || record.type === "send")) this.#tls.lookNow(record.pid);
    this.#queue.push(record); // a drop here is counted by the queue; the line is still recorded
    return true;
  };
}
