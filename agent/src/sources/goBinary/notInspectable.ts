// The one way the inspection modules say "this binary cannot be probed at the
// request level". It is thrown deep inside the parsers, where the reason is
// known, and turned into `{ ok: false, reason }` by the entry point, so the
// agent falls back to the socket-level path instead of crashing on an odd file.
export class NotInspectable extends Error {
  override readonly name = "NotInspectable";
}
