// Reading the kernel's TCP tables: rows as /proc/net/tcp and tcp6 print them
// (captured on this kernel, little-endian), and finding the client end of an
// accepted connection among them.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { decodeHexAddress, findClientSocket, parseProcNetTcp } from "../../../../src/sources/spans/procNetTcp.ts";

// A python client (127.0.0.1:41668) connected to the agent's 127.0.0.1:4318, both ends, and the listener.
const TCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:10DE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 91234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A2C4 0100007F:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 91300 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:10DE 0100007F:A2C4 01 00000000:00000000 00:00000000 00000000     0        0 91301 1 0000000000000000 20 4 31 10 -1
   3: 0100007F:A2C5 0100007F:10DE 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0000000000000000
`;
// An IPv4 client of a dual-stack listener ([::]:4318) and an IPv6 loopback client.
const TCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:10DE 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 92000 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:10DE 0000000000000000FFFF00000100007F:B00A 01 00000000:00000000 00:00000000 00000000     0        0 92001 1 0000000000000000 20 4 30 10 -1
   2: 00000000000000000000000001000000:C350 00000000000000000000000001000000:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 92002 1 0000000000000000 20 4 30 10 -1
   3: B80D0120000000000000000001000000:9C40 B80D0120000000000000000002000000:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 92003 1 0000000000000000 20 4 30 10 -1
`;

void describe("/proc/net/tcp", { timeout: 10_000 }, () => {
  void test("IPv4 rows: addresses in host byte order, ports as numbers, the state and the inode", () => {
    const rows = parseProcNetTcp(TCP, true);
    assert.equal(rows.length, 4, "the header is no row");
    assert.deepEqual(rows[1], { local: { address: "127.0.0.1", port: 41668 }, remote: { address: "127.0.0.1", port: 4318 }, state: 1, inode: 91300 });
    assert.equal(rows[3]?.inode, 0, "TIME_WAIT: no file holds it");
  });

  void test("IPv6 rows: four host-order words; IPv4-mapped addresses read as IPv4, the others in canonical form", () => {
    const rows = parseProcNetTcp(TCP6, true);
    assert.equal(rows.length, 4);
    assert.deepEqual(rows[1]?.local, { address: "127.0.0.1", port: 4318 });
    assert.deepEqual(rows[2]?.local, { address: "0:0:0:0:0:0:0:1", port: 50000 });
    assert.deepEqual(rows[3]?.local, { address: "2001:db8:0:0:0:0:0:1", port: 40000 });
    assert.equal(decodeHexAddress("0000000000000000FFFF00000A00020A", true), "10.2.0.10");
  });

  void test("a big-endian kernel prints the words the other way round", () => {
    assert.equal(decodeHexAddress("7F000001", false), "127.0.0.1");
    assert.equal(decodeHexAddress("00000000000000000000FFFF7F000001", false), "127.0.0.1");
  });

  void test("malformed rows and fields are skipped, not guessed", () => {
    const text = ["   0: 0100007F:10DE", "   1: ZZ00007F:10DE 0100007F:A2C4 01 0:0 0:0 0 0 0 5", "   2: 0100007F:1 0100007F:A2C4 01 0:0 0:0 0 0 0 5", "garbage"].join("\n");
    assert.deepEqual(parseProcNetTcp(text, true), []);
    assert.equal(decodeHexAddress("0100007", true), null);
    assert.equal(decodeHexAddress("0100007F0100007F", true), null, "neither 4 nor 16 bytes");
  });

  void test("the client end of an accepted connection: the mirror of the agent's socket in its namespace", () => {
    const rows = [...parseProcNetTcp(TCP, true), ...parseProcNetTcp(TCP6, true)];
    const at = (client: [string, number], server: [string, number]) => ({ client: { address: client[0], port: client[1] }, server: { address: server[0], port: server[1] } });
    assert.equal(findClientSocket(rows, at(["127.0.0.1", 41668], ["127.0.0.1", 4318]), true), 91300, "not the agent's own end, 91301");
    assert.equal(findClientSocket(rows, at(["::ffff:127.0.0.1", 41668], ["::ffff:127.0.0.1", 4318]), true), 91300, "as a dual-stack listener names it");
    assert.equal(findClientSocket(rows, at(["::1", 50000], ["::1", 4318]), true), 92002);
    assert.equal(findClientSocket(rows, at(["127.0.0.1", 41669], ["127.0.0.1", 4318]), true), null, "no such client");
    assert.equal(findClientSocket(rows, at(["127.0.0.1", 41669 - 1], ["127.0.0.1", 4317]), true), null, "another port dialled");
    assert.equal(findClientSocket(rows, at(["127.0.0.1", 41669], ["127.0.0.1", 4318]), true), null);
  });

  void test("in another namespace the dialled address may differ (a ClusterIP, a remapped hostPort), the client's own may not", () => {
    const row = (local: string, remote: string, inode: number): string => `   9: ${local} ${remote} 01 00000000:00000000 00:00000000 00000000 0 0 ${inode} 1`;
    const viaService = parseProcNetTcp(row("0200D50A:9C40", "0A00600A:10DE", 500), true); // 10.213.0.2:40000 → 10.96.0.10:4318
    const conn = { client: { address: "10.213.0.2", port: 40000 }, server: { address: "10.213.0.1", port: 4318 } };
    assert.equal(findClientSocket(viaService, conn, false), 500);
    assert.equal(findClientSocket(viaService, conn, true), null, "in the agent's own namespace it must be the exact mirror");
    const remapped = parseProcNetTcp(row("0200D50A:9C40", "0100D50A:37DE", 501), true); // dialled 14302
    assert.equal(findClientSocket(remapped, conn, false), 501, "the one socket at the client's address and port");
    // Linux lets one local port carry connections to several remotes: then it is no one's.
    const shared = parseProcNetTcp([row("0200D50A:9C40", "0100D50A:37DE", 502), row("0200D50A:9C40", "0500D50A:01BB", 503)].join("\n"), true);
    assert.equal(findClientSocket(shared, conn, false), null);
    const oneDialsOurs = parseProcNetTcp([row("0200D50A:9C40", "0100D50A:10DE", 504), row("0200D50A:9C40", "0500D50A:01BB", 505)].join("\n"), true);
    assert.equal(findClientSocket(oneDialsOurs, conn, false), 504, "unless exactly one dialled the agent's port");
  });
});
