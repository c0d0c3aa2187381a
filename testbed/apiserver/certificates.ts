// A throw-away certificate authority and serving certificate for the testbed
// apiserver, made with the openssl CLI (present on every Debian image, and it
// produces certificates that Go's strict x509 verifier — kubectl — accepts).
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { execa } from "execa";

export interface Certificates {
  caPath: string;
  certPath: string;
  keyPath: string;
  caPem: string;
  certPem: string;
  keyPem: string;
}

const CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

// SANs cover every loopback name a client may use; Go clients ignore the CN.
const SERVER_EXTENSIONS = [
  "basicConstraints=critical,CA:FALSE",
  "keyUsage=critical,digitalSignature,keyEncipherment",
  "extendedKeyUsage=serverAuth",
  "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
].join("\n");

/** Writes ca.crt, server.crt and server.key into `dir` and returns their paths and contents. */
export async function generateCertificates(dir: string): Promise<Certificates> {
  await mkdir(dir, { recursive: true });
  const caPath = path.join(dir, "ca.crt");
  const caKeyPath = path.join(dir, "ca.key");
  const certPath = path.join(dir, "server.crt");
  const keyPath = path.join(dir, "server.key");
  const csrPath = path.join(dir, "server.csr");
  const extPath = path.join(dir, "server.ext");

  await execa("openssl", [
    "req", "-x509", ...CURVE, "-keyout", caKeyPath, "-out", caPath, "-days", "7",
    "-subj", "/CN=lostwrite-testbed-ca",
    "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  await execa("openssl", [
    "req", ...CURVE, "-keyout", keyPath, "-out", csrPath, "-subj", "/CN=lostwrite-testbed-apiserver",
  ]);
  await writeFile(extPath, SERVER_EXTENSIONS + "\n");
  await execa("openssl", [
    "x509", "-req", "-in", csrPath, "-CA", caPath, "-CAkey", caKeyPath, "-set_serial", String(Date.now()),
    "-days", "7", "-out", certPath, "-extfile", extPath,
  ]);
  const [caPem, certPem, keyPem] = await Promise.all([
    readFile(caPath, "utf8"), readFile(certPath, "utf8"), readFile(keyPath, "utf8"),
  ]);
  return { caPath, certPath, keyPath, caPem, certPem, keyPem };
}
