// Which file a target's OpenSSL is in, read from a /proc laid out as the
// host's: a mapped libssl through the process's root, else its executable
// when that exports OpenSSL (node), else none yet.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink, writeFile, copyFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openSslOf } from "../../../../src/sources/tls/openSslOf.ts";

const MAPS_PREFIX = "7f1c2a000000-7f1c2a01f000 r--p 00000000 08:01 1835041                    ";

void describe("openSslOf", { timeout: 10_000 }, () => {
  let proc: string;
  before(async () => {
    proc = await mkdtemp(path.join(tmpdir(), "lostwrite-openssl-"));
    // 10: python after `import ssl`, libssl mapped from its own root.
    await mkdir(path.join(proc, "10/root/usr/lib/x86_64-linux-gnu"), { recursive: true });
    await writeFile(path.join(proc, "10/root/usr/lib/x86_64-linux-gnu/libssl.so.3"), "not really ELF");
    await writeFile(path.join(proc, "10/maps"), `${MAPS_PREFIX}/usr/bin/python3.11\n${MAPS_PREFIX}/usr/lib/x86_64-linux-gnu/libssl.so.3\n`);
    // 20: node, OpenSSL linked in and exported.
    await mkdir(path.join(proc, "20"));
    await symlink(process.execPath, path.join(proc, "20/exe"));
    await writeFile(path.join(proc, "20/maps"), `${MAPS_PREFIX}${process.execPath}\n`);
    // 30: a program with neither (a copy of a small system binary).
    await mkdir(path.join(proc, "30"));
    await copyFile("/usr/bin/true", path.join(proc, "30/exe"));
    await writeFile(path.join(proc, "30/maps"), `${MAPS_PREFIX}/usr/bin/true\n${MAPS_PREFIX}/usr/lib/x86_64-linux-gnu/libc.so.6\n`);
  });
  after(async () => rm(proc, { recursive: true, force: true }));

  void it("finds a mapped libssl through the process's root, keyed by the file", async () => {
    const found = await openSslOf(proc, 10);
    assert.ok(typeof found !== "string", JSON.stringify(found));
    assert.equal(found.path, path.join(proc, "10/root/usr/lib/x86_64-linux-gnu/libssl.so.3"));
    assert.match(found.key, /^\d+:\d+$/);
    // Opened at once: the descriptor is the file the key names, whatever becomes of the path.
    const held = await found.handle.stat();
    await found.handle.close();
    assert.equal(`${held.dev}:${held.ino}`, found.key);
  });

  void it("takes the executable when it exports OpenSSL itself, as node does", async () => {
    const found = await openSslOf(proc, 20);
    assert.ok(typeof found !== "string", JSON.stringify(found));
    assert.equal(found.path, path.join(proc, "20/exe"));
    await found.handle.close();
  });

  void it("says why there is none: nothing mapped yet, or the process is gone", async () => {
    assert.equal(await openSslOf(proc, 30), "no OpenSSL mapped");
    const gone = await openSslOf(proc, 40);
    assert.ok(typeof gone === "string");
    assert.match(gone, /^cannot read its maps: .*ENOENT/);
  });
});
