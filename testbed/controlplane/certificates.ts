// The control plane's certificates (testbed/certificateAuthority.ts): one CA that signs the
// apiserver's serving certificate and the clients' certificates (the
// apiserver's --client-ca-file), a client certificate per identity, and the
// service-account signing key pair. Everything is valid for 7 days and lives
// in the control plane's temporary directory.
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { execa } from "execa";
import { createCertificateAuthority, type KeyPair, signedKeyPair } from "../certificateAuthority.ts";

export type { KeyPair };

/** A client identity: the certificate's CN is the user name, each O a group. */
export interface Identity {
  user: string;
  groups: readonly string[];
}

interface ControlPlaneCertificates {
  dir: string;
  caPath: string;
  caPem: string;
  /** The apiserver's serving certificate (127.0.0.1, ::1, localhost, the service IP); also usable by a webhook on loopback. */
  serving: KeyPair;
  /** Service-account token signing: the private key and its public half. */
  serviceAccountKeyPath: string;
  serviceAccountPublicKeyPath: string;
}

/** The CA, the serving certificate and the service-account keys, in `dir`. */
export async function generateControlPlaneCertificates(dir: string): Promise<ControlPlaneCertificates & { caKeyPath: string }> {
  await mkdir(dir, { recursive: true });
  const ca = await createCertificateAuthority(dir, "lostwrite-controlplane-ca");
  const serving = await signedKeyPair(dir, "apiserver", "/CN=kube-apiserver", [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    // 10.0.0.1: the `kubernetes` Service's address in --service-cluster-ip-range.
    "subjectAltName=IP:127.0.0.1,IP:::1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc",
  ], ca);
  const serviceAccountKeyPath = path.join(dir, "sa.key");
  const serviceAccountPublicKeyPath = path.join(dir, "sa.pub");
  await execa("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", serviceAccountKeyPath]);
  await execa("openssl", ["pkey", "-in", serviceAccountKeyPath, "-pubout", "-out", serviceAccountPublicKeyPath]);
  return { dir, caPath: ca.caPath, caKeyPath: ca.caKeyPath, caPem: ca.caPem, serving, serviceAccountKeyPath, serviceAccountPublicKeyPath };
}

/** A client certificate for `identity`, signed by the control plane's CA (the apiserver's --client-ca-file). */
export async function generateClientCertificate(certs: { dir: string; caPath: string; caKeyPath: string }, name: string, identity: Identity): Promise<KeyPair> {
  // The subject's fields are escaped for openssl's -subj syntax ("/" and "=" are its separators).
  const escape = (value: string): string => value.replace(/[\\/=]/g, (c) => `\\${c}`);
  const subject = `${identity.groups.map((g) => `/O=${escape(g)}`).join("")}/CN=${escape(identity.user)}`;
  return signedKeyPair(certs.dir, name, subject, [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=clientAuth",
  ], certs);
}
