// A throw-away certificate authority and the certificates it signs, made with
// the openssl CLI (present on every Debian image, and it produces certificates
// that Go's strict x509 verifier — kubectl, client-go — accepts). Used by the
// testbed apiserver and the real control plane; everything is valid for 7 days.
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { execa } from "execa";

const CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

interface CertificateAuthority {
  caPath: string;
  caKeyPath: string;
  caPem: string;
}

export interface KeyPair {
  certPath: string;
  keyPath: string;
  certPem: string;
  keyPem: string;
}

/** A self-signed CA at `dir`/ca.crt and ca.key. */
export async function createCertificateAuthority(dir: string, commonName: string): Promise<CertificateAuthority> {
  const caPath = path.join(dir, "ca.crt");
  const caKeyPath = path.join(dir, "ca.key");
  await execa("openssl", [
    "req", "-x509", ...CURVE, "-keyout", caKeyPath, "-out", caPath, "-days", "7",
    "-subj", `/CN=${commonName}`,
    "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  return { caPath, caKeyPath, caPem: await readFile(caPath, "utf8") };
}

/** A key and a certificate for `subject` (openssl -subj syntax) with these X.509v3 extensions, signed by `ca`: `dir`/`name`.crt and .key. */
export async function signedKeyPair(dir: string, name: string, subject: string, extensions: readonly string[], ca: Omit<CertificateAuthority, "caPem">): Promise<KeyPair> {
  const keyPath = path.join(dir, `${name}.key`);
  const certPath = path.join(dir, `${name}.crt`);
  const csrPath = path.join(dir, `${name}.csr`);
  const extPath = path.join(dir, `${name}.ext`);
  await execa("openssl", ["req", ...CURVE, "-keyout", keyPath, "-out", csrPath, "-subj", subject]);
  await writeFile(extPath, extensions.join("\n") + "\n");
  await execa("openssl", [
    // Serials must differ between certificates of one CA; several are signed within a millisecond.
    "x509", "-req", "-in", csrPath, "-CA", ca.caPath, "-CAkey", ca.caKeyPath, "-set_serial", String(Date.now() * 1000 + Math.floor(Math.random() * 1000)),
    "-days", "7", "-out", certPath, "-extfile", extPath,
  ]);
  const [certPem, keyPem] = await Promise.all([readFile(certPath, "utf8"), readFile(keyPath, "utf8")]);
  return { certPath, keyPath, certPem, keyPem };
}
