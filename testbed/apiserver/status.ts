// Kubernetes `Status` bodies: what a real apiserver answers on every failure.
// Clients (client-go, kubectl, client-node) read `reason` and `code` from them.

interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
  causes?: { reason?: string; message: string; field?: string }[];
  retryAfterSeconds?: number;
}

interface StatusBody {
  kind: "Status";
  apiVersion: "v1";
  metadata: Record<string, never>;
  status: "Failure" | "Success";
  message: string;
  reason: string;
  details?: StatusDetails;
  code: number;
}

/** The reason Kubernetes uses for each HTTP code we answer with. */
const REASONS: Record<number, string> = {
  400: "BadRequest",
  404: "NotFound",
  405: "MethodNotAllowed",
  406: "NotAcceptable",
  409: "Conflict",
  410: "Expired",
  415: "UnsupportedMediaType",
  422: "Invalid",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

function reasonForCode(code: number): string {
  return REASONS[code] ?? (code >= 500 ? "InternalError" : "BadRequest");
}

export function statusBody(code: number, message: string, reason?: string, details?: StatusDetails): StatusBody {
  return {
    kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message,
    reason: reason ?? reasonForCode(code), ...(details ? { details } : {}), code,
  };
}

/** A failure the request handler turns into a `Status` answer. */
export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: StatusDetails | undefined;

  constructor(code: number, message: string, details?: StatusDetails, reason?: string) {
    super(message);
    this.code = code;
    this.reason = reason ?? reasonForCode(code);
    this.details = details;
  }

  toStatus(): StatusBody {
    return statusBody(this.code, this.message, this.reason, this.details);
  }
}
