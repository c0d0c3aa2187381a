// Many probed files' programs as one bpftrace program: each bpftrace process
// holds LLVM, clang and the kernel's parsed BTF (about 30 MiB of its own
// memory even for an empty program, see README "What it costs the node"), so
// the agent runs every file's program in one process rather than one process
// per file. Each file's program is taken whole, as its renderer made it
// (goProbeProgram.ts, tlsProbeProgram.ts), and kept apart from the others:
//
// - its maps are renamed `@name` -> `@name__<id>`, so the programs share no
//   state: each has its own followed pids (followedPids.ts), its own
//   in-flight requests, and its own per-socket entries, exactly as in a
//   process of its own;
// - every line it prints starts with `#<id> `, which the parser takes off
//   (probeOutput.ts), so the agent knows whose line it is;
// - bpftrace takes one BEGIN and one END: theirs are joined, in order;
// - the liveness tick (`interval:s:1 { printf("tick %llu\n", nsecs); }`,
//   the same in every part) runs once, the first part's: it says the process runs, which is the process's
//   fact, not a part's, and the supervisor counts the ticks the kernel skipped
//   from the gaps between them (bpftraceSupervisor.ts), which N timers of
//   different phases would hide.
//
// Everything else (probes, predicates, bodies) is left as it was written.
// The id is the file's follow id (followChannel.ts), which its program's
// follow messages already carry.

/** One file's program in a combined one. */
interface ProgramPart {
  /** The file's follow id (0…254): its maps' suffix, and its lines' tag. */
  id: number;
  /** Its whole program, as its renderer made it. */
  text: string;
}

/** One top-level item of a program: its header (the probe and predicate) and its body, braces left out. */
interface ProgramBlock {
  header: string;
  body: string;
}

/**
 * The top-level blocks of a bpftrace program, comments left out. Strings and
 * comments are skipped when counting braces; a brace left open or closed
 * once too often is an error naming where.
 */
export function programBlocks(text: string): ProgramBlock[] {
  const blocks: ProgramBlock[] = [];
  let depth = 0;
  let header = "";
  let body = "";
  let line = 1;
  let i = 0;
  const emit = (s: string): void => {
    if (depth === 0) header += s;
    else body += s;
  };
  while (i < text.length) {
    const c = text[i]!;
    if (c === "\n") line++;
    if (c === "/" && text[i + 1] === "/") {
      const end = text.indexOf("\n", i);
      i = end === -1 ? text.length : end;
      continue;
    }
    if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      if (end === -1) throw new SyntaxError(`program: a comment opened at line ${line} is never closed`);
      line += text.slice(i, end).split("\n").length - 1;
      i = end + 2;
      continue;
    }
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      if (j >= text.length) throw new SyntaxError(`program: a string opened at line ${line} is never closed`);
      emit(text.slice(i, j + 1));
      i = j + 1;
      continue;
    }
    if (c === "{") {
      depth++;
      if (depth > 1) body += c;
    } else if (c === "}") {
      if (depth === 0) throw new SyntaxError(`program: a "}" at line ${line} closes no block`);
      depth--;
      if (depth > 0) body += c;
      else {
        // Lines the comments left empty go too.
        blocks.push({ header: header.trim(), body: body.split("\n").filter((l) => l.trim() !== "").join("\n") });
        header = "";
        body = "";
      }
    } else emit(c);
    i++;
  }
  if (depth !== 0) throw new SyntaxError("program: a block is never closed");
  if (header.trim() !== "") throw new SyntaxError(`program: text after the last block: ${JSON.stringify(header.trim().slice(0, 60))}`);
  return blocks;
}

/** Rewrites outside strings: map names get the part's suffix; inside strings, printf formats get its tag. */
function separate(text: string, id: number): string {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const printf = /^printf\s*\(\s*"/.exec(text.slice(i, i + 20));
    if (printf) {
      out += `${printf[0]}#${id} `;
      i += printf[0].length;
      // The rest of the format string as it is.
      let j = i;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (text[i] === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    const map = /^@([A-Za-z_][A-Za-z0-9_]*)/.exec(text.slice(i, i + 80));
    if (map) {
      out += `@${map[1]}__${id}`;
      i += map[0].length;
      continue;
    }
    out += text[i];
    i++;
  }
  return out;
}

/** A part's id and first comment line (what generated it, for which file), for the combined program's header. */
function describe(part: ProgramPart): string {
  const first = part.text.split("\n").find((line) => line.startsWith("//"));
  return `// #${part.id}: ${first ? first.replace(/^\/\/\s*/, "") : "(no comment)"}`;
}

/** The tick every program prints for the supervisor's heartbeat, and nothing else (a part's other timers are its own). */
function isLivenessTick(block: ProgramBlock): boolean {
  return block.header === "interval:s:1" && /^\s*printf\("tick %llu\\n", nsecs\);\s*$/.test(block.body);
}

/** The parts as one program; bpftrace runs it as each part would run alone (`bpftrace -f json FILE AGENT_HOST_PID`). */
export function combinePrograms(parts: readonly ProgramPart[]): string {
  if (parts.length === 0) throw new RangeError("combinePrograms: no program to combine");
  const ids = new Set<number>();
  const begin: string[] = [];
  const end: string[] = [];
  const probes: string[] = [];
  let ticking = false;
  for (const part of parts) {
    if (!Number.isInteger(part.id) || part.id < 0) throw new RangeError(`combinePrograms: part id must be a non-negative integer, got ${part.id}`);
    if (ids.has(part.id)) throw new RangeError(`combinePrograms: part id ${part.id} given twice`);
    ids.add(part.id);
    for (const block of programBlocks(part.text)) {
      const body = separate(block.body, part.id);
      if (block.header === "BEGIN") begin.push(body);
      else if (block.header === "END") end.push(body);
      else if (isLivenessTick(block)) {
        if (ticking) continue;
        ticking = true;
        probes.push(`${block.header} {\n${body}\n}`);
      } else probes.push(`${separate(block.header, part.id)} {\n${body}\n}`);
    }
  }
  return [
    `// Generated by lostwrite: the uprobe programs of ${parts.length} file${parts.length === 1 ? "" : "s"} in one bpftrace (agent/src/sources/probe/combinedProgram.ts).`,
    ...parts.map(describe),
    "",
    `BEGIN {\n${begin.join("\n")}\n}`,
    "",
    probes.join("\n\n"),
    "",
    `END {\n${end.join("\n")}\n}`,
    "",
  ].join("\n");
}
