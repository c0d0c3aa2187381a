// node:http for the agent's servers, loaded with require() rather than import.
// An ES import of node:http builds the module's namespace, which reads every
// export, and http's WebSocket, CloseEvent and MessageEvent exports are lazy
// getters into undici: importing node:http loads Node's bundled undici (its
// fetch and WebSocket client), which the agent does not use. require()
// returns the exports object without reading them. Measured with
// `npm run bench:footprint`: the agent's idle RSS is about 12 MiB lower.
// (fetch() for --otlp-forward still loads undici, then and only then.)
import { createRequire } from "node:module";
import type * as Http from "node:http";

const http = createRequire(import.meta.url)("node:http") as typeof Http;
export default http;
