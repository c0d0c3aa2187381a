// The demo's third target: a small python3 client (statusWriter.py) that
// writes status like client-go does, into a dead connection too, which the
// Node operators never do. It runs under the name `status-writer` (a symlink
// to python3), so that is its kernel comm, and does one thing per command,
// answering each with a JSON line.
import { spawn, type ChildProcess } from "node:child_process";
import { symlinkSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { WriteStream } from "node:fs";
import { z } from "zod";

const SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), "statusWriter.py");
const STATUS_WRITER_COMM = "status-writer";
/** The namespace of the status writer's Widget: a fault rule's path picks it by that. */
export const STATUS_WRITER_NAMESPACE = "writer";
const COMMAND_TIMEOUT_MS = 15_000;

export type WriterCommand = "patch" | "zero";

const reportSchema = z.looseObject({
  step: z.string(),
  status: z.number().nullable().optional(),
  write_again: z.string().nullable().optional(),
  sent: z.number().optional(),
  error: z.string().optional(),
});
export type WriterReport = z.output<typeof reportSchema>;

export interface StatusWriter {
  pid: number;
  namespace: string;
  child: ChildProcess;
  /** Runs one command; resolves with the writer's report of it. */
  run(command: WriterCommand): Promise<WriterReport>;
}

export async function startStatusWriter(opts: { dir: string; host: string; port: number; path: string; logFile: WriteStream }): Promise<StatusWriter> {
  const exe = path.join(opts.dir, STATUS_WRITER_COMM);
  symlinkSync("/usr/bin/python3", exe);
  const child = spawn(exe, [SCRIPT, opts.host, String(opts.port), opts.path], { stdio: ["pipe", "pipe", "pipe"] });
  const waiting: ((report: WriterReport) => void)[] = [];
  let buffered = "";
  let exited = false;
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => opts.logFile.write(`status writer: ${chunk}`));
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    buffered += chunk;
    let newline: number;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      opts.logFile.write(`status writer: ${line}\n`);
      let parsed: WriterReport;
      try {
        parsed = reportSchema.parse(JSON.parse(line));
      } catch {
        continue;
      }
      waiting.shift()?.(parsed);
    }
  });
  const next = (what: string): Promise<WriterReport> =>
    new Promise((resolve, reject) => {
      if (exited) return reject(new Error(`the status writer has exited; ${what} not done`));
      const timer = setTimeout(() => reject(new Error(`the status writer did not answer ${what} within ${COMMAND_TIMEOUT_MS} ms`)), COMMAND_TIMEOUT_MS);
      waiting.push((report) => {
        clearTimeout(timer);
        resolve(report);
      });
    });
  const ready = next("start-up");
  const failed = new Promise<never>((_, reject) => {
    child.once("error", reject);
    child.once("exit", (code, how) => {
      exited = true;
      reject(new Error(`the status writer exited (${how ?? `code ${code}`})`));
    });
  });
  failed.catch(() => undefined);
  try {
    await Promise.race([ready, failed]);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  const run = (command: WriterCommand): Promise<WriterReport> => {
    const answer = next(command);
    child.stdin.write(`${command}\n`);
    return Promise.race([answer, failed]);
  };
  return { pid: child.pid!, namespace: STATUS_WRITER_NAMESPACE, child, run };
}
