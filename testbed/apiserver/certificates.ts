// A throw-away certificate authority and serving certificate for the testbed
// apiserver (testbed/certificateAuthority.ts).
import { mkdir } from "node:fs/promises";
import { createCertificateAuthority, signedKeyPair } from "../certificateAuthority.ts";

interface Certificates {
  caPath: string;
  certPath: string;
  keyPath: string;
  caPem: string;
  certPem: string;
  keyPem: string;
}

// SANs cover every loopback name a client may use; Go clients ignore the CN.
const SERVER_EXTENSIONS = [
  "basicConstraints=critical,CA:FALSE",
  "keyUsage=critical,digitalSignature,keyEncipherment",
  "extendedKeyUsage=serverAuth",
  "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
];

/** Writes ca.crt, server.crt and server.key into `dir` and returns their paths and contents. */
export async function generateCertificates(dir: string): Promise<Certificates> {
  await mkdir(dir, { recursive: true });
  const ca = await createCertificateAuthority(dir, "lostwrite-testbed-ca");
  const server = await signedKeyPair(dir, "server", "/CN=lostwrite-testbed-apiserver", SERVER_EXTENSIONS, ca);
  return { caPath: ca.caPath, caPem: ca.caPem, ...server };
}
