// The control plane's certificates, made with the openssl CLI as the testbed
// apiserver's are (testbed/apiserver/certificates.ts): one CA that signs the
// apiserver's serving certificate and the clients' certificates (the
// apiserver's --client-ca-file), a client certificate per identity, and the
// service-account signing key pair. Everything is valid for 7 days and lives
// in the control plane's temporary directory.
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { execa } from "execa";

const CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/** A client identity: the certificate's CN is the user name, each O a group. */
export interface Identity {
  user: string;
  groups: readonly string[];
}

export interface KeyPair {
  certPath: string;
  keyPath: string;
  certPem: string;
  keyPem: string;
}

export interface ControlPlaneCertificates {
  dir: string;
  caPath: string;
  caPem: string;
  /** The apiserver's serving certificate (127.0.0.1, ::1, localhost, the service IP); also usable by a webhook on loopback. */
  serving: KeyPair;
  /** Service-account token signing: the private key and its public half. */
  serviceAccountKeyPath: string;
  serviceAccountPublicKeyPath: string;
}

async function signed(dir: string, name: string, subject: string, extensions: string[], ca: { caPath: string; caKeyPath: string }): Promise<KeyPair> {
  const keyPath = path.join(dir, `${name}.key`);
  const certPath = path.join(dir, `${name}.crt`);
  const csrPath = path.join(dir, `${name}.csr`);
  const extPath = path.join(dir, `${name}.ext`);
  await execa("openssl", ["req", ...CURVE, "-keyout", keyPath, "-out", csrPath, "-subj", subject]);
  await writeFile(extPath, extensions.join("\n") + "\n");
  await execa("openssl", [
    "x509", "-req", "-in", csrPath, "-CA", ca.caPath, "-CAkey", ca.caKeyPath, "-set_serial", String(Date.now() * 1000 + Math.floor(Math.random() * 1000)),
    "-days", "7", "-out", certPath, "-extfile", extPath,
  ]);
  const [certPem, keyPem] = await Promise.all([readFile(certPath, "utf8"), readFile(keyPath, "utf8")]);
  return { certPath, keyPath, certPem, keyPem };
}

/** The CA, the serving certificate and the service-account keys, in `dir`. */
export async function generateControlPlaneCertificates(dir: string): Promise<ControlPlaneCertificates & { caKeyPath: string }> {
  await mkdir(dir, { recursive: true });
  const caPath = path.join(dir, "ca.crt");
  const caKeyPath = path.join(dir, "ca.key");
  await execa("openssl", [
    "req", "-x509", ...CURVE, "-keyout", caKeyPath, "-out", caPath, "-days", "7",
    "-subj", "/CN=lostwrite-controlplane-ca",
    "-addext", "basicConstraints=critical,CA:TRUE",
    "-addext", "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  const serving = await signed(dir, "apiserver", "/CN=kube-apiserver", [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    // 10.0.0.1: the `kubernetes` Service's address in --service-cluster-ip-range.
    "subjectAltName=IP:127.0.0.1,IP:::1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc",
  ], { caPath, caKeyPath });
  const serviceAccountKeyPath = path.join(dir, "sa.key");
  const serviceAccountPublicKeyPath = path.join(dir, "sa.pub");
  await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", serviceAccountKeyPath]);
  await execa("openssl", ["pkey", "-in", serviceAccountKeyPath, "-pubout", "-out", serviceAccountPublicKeyPath]);
  return { dir, caPath, caKeyPath, caPem: await readFile(caPath, "utf8"), serving, serviceAccountKeyPath, serviceAccountPublicKeyPath };
}

/** A client certificate for `identity`, signed by the control plane's CA (the apiserver's --client-ca-file). */
export async function generateClientCertificate(certs: { dir: string; caPath: string; caKeyPath: string }, name: string, identity: Identity): Promise<KeyPair> {
  // The subject's fields are escaped for openssl's -subj syntax ("/" and "=" are its separators).
  const escape = (value: string): string => value.replace(/[\\/=]/g, (c) => `\\${c}`);
  const subject = `${identity.groups.map((g) => `/O=${escape(g)}`).join("")}/CN=${escape(identity.user)}`;
  return signed(certs.dir, name, subject, [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=clientAuth",
  ], certs);
}
