import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bracketHost, formatHostPort, parseHostPort, splitHostPort, unbracketHost } from "../../src/hostPort.ts";

describe("host:port", { timeout: 10_000 }, () => {
  it("splits IPv4, names and bracketed IPv6", () => {
    assert.deepEqual(splitHostPort("10.96.0.1:443"), { host: "10.96.0.1", port: 443 });
    assert.deepEqual(splitHostPort("localhost:0"), { host: "localhost", port: 0 });
    assert.deepEqual(splitHostPort("[fd00::1]:6443"), { host: "fd00::1", port: 6443 });
  });

  it("refuses what is not HOST:PORT", () => {
    for (const bad of ["fd00::1:443", "10.0.0.1", ":443", "10.0.0.1:65536", "10.0.0.1:-1", "[fd00::1]", "a b:80", "10.0.0.1:443 "]) {
      assert.equal(splitHostPort(bad), null, bad);
    }
  });

  it("names what was expected and the value in the error", () => {
    assert.throws(() => parseHostPort("nope", "listen"), /listen: "nope" is not HOST:PORT or \[IPv6\]:PORT/);
    assert.throws(() => parseHostPort("10.0.0.1:70000", "listen"), /listen: port "70000" of "10.0.0.1:70000" is not 0..65535/);
  });

  it("writes IPv6 in brackets, once, and round-trips", () => {
    assert.equal(formatHostPort("fd00::1", 443), "[fd00::1]:443");
    assert.equal(formatHostPort("[fd00::1]", 443), "[fd00::1]:443");
    assert.equal(formatHostPort("10.0.0.1", 443), "10.0.0.1:443");
    assert.equal(bracketHost("::1"), "[::1]");
    assert.equal(unbracketHost("[::1]"), "::1");
    assert.equal(unbracketHost("10.0.0.1"), "10.0.0.1");
    for (const text of ["[::ffff:10.0.0.1]:443", "127.0.0.1:9470"]) {
      const { host, port } = parseHostPort(text);
      assert.equal(formatHostPort(host, port), text);
    }
  });
});
