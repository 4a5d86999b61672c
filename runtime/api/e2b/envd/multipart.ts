// multipart/form-data bodies (RFC 7578) as the E2B SDK sends files: each part's bytes and its filename.
import { Code, ConnectError } from "@connectrpc/connect";

export interface FormFile {
  readonly filename: string | undefined;
  readonly data: Buffer;
}

/** The parts of `body`, whose boundary `contentType` names; a malformed body is an InvalidArgument. */
export function multipartFiles(body: Buffer, contentType: string): FormFile[] {
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  const name = boundary?.[1] ?? boundary?.[2];
  if (!name)
    throw new ConnectError("the multipart body's Content-Type names no boundary", Code.InvalidArgument);
  const delimiter = Buffer.from(`--${name}`);
  const files: FormFile[] = [];
  let at = body.indexOf(delimiter);
  if (at < 0) throw new ConnectError("the multipart body has no part", Code.InvalidArgument);
  for (;;) {
    at += delimiter.length;
    // `--` after a delimiter ends the body.
    if (body.subarray(at, at + 2).toString() === "--") return files;
    const headersEnd = body.indexOf("\r\n\r\n", at);
    const next = body.indexOf(Buffer.concat([Buffer.from("\r\n"), delimiter]), headersEnd);
    if (headersEnd < 0 || next < 0)
      throw new ConnectError("the multipart body ends inside a part", Code.InvalidArgument);
    const headers = body.subarray(at, headersEnd).toString("utf8");
    const filename = /filename="((?:[^"\\]|\\.)*)"/i.exec(headers)?.[1];
    files.push({ filename, data: body.subarray(headersEnd + 4, next) });
    at = next + 2;
  }
}
