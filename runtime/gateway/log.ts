// The credential gateway's request log is the store's (store/audit.ts); the API's routes read it from here.
export { gatewayRequests, type GatewayRequest } from "../store/audit.js";
