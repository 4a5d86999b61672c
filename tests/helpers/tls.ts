// A test CA and one server certificate signed by it (openssl), for the tests' own HTTPS servers: what a client
// under test is told to trust in place of the world's CAs.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";

const exec = promisify(execFile);

export interface TestCertificates {
  /** ca.pem, server.pem and server.key in the directory given. */
  readonly caFile: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** Their PEM texts. */
  readonly caCert: string;
  readonly cert: string;
  readonly key: string;
}

/**
 * Writes a CA (`caName`) and a server certificate for `altNames` (subjectAltName entries: `DNS:<name>`,
 * `IP:<address>`; the first is also its CN) into `dir`. P-256 keys, valid for two days.
 */
export async function makeTestCertificates(
  dir: string,
  caName: string,
  altNames: readonly string[],
): Promise<TestCertificates> {
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => exec("openssl", args, { cwd: dir });
  const key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  await openssl(
    "req",
    "-x509",
    ...key,
    "-days",
    "2",
    "-subj",
    `/CN=${caName}`,
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
  );
  const commonName = altNames[0]!.replace(/^[A-Z]+:/, "");
  await openssl("req", ...key, "-subj", `/CN=${commonName}`, "-keyout", "server.key", "-out", "server.csr");
  await fs.writeFile(
    file("server.ext"),
    `subjectAltName=${altNames.join(",")}\nextendedKeyUsage=serverAuth\n`,
  );
  await openssl(
    ...["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"],
    ...["-days", "2", "-extfile", "server.ext", "-out", "server.pem"],
  );
  const [caCert, cert, keyPem] = await Promise.all(
    ["ca.pem", "server.pem", "server.key"].map((name) => fs.readFile(file(name), "utf8")),
  );
  return {
    caFile: file("ca.pem"),
    certFile: file("server.pem"),
    keyFile: file("server.key"),
    caCert: caCert!,
    cert: cert!,
    key: keyPem!,
  };
}
