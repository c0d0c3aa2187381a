// A bench's count option (--rounds, --losses, …): a positive integer, or the
// default when not given; anything else stops the bench with the value named.
export function positiveOption(name: string, value: string | undefined, fallback: number): number {
  const n = value === undefined ? fallback : Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
  return n;
}
