// The operations queue lives in store/operations.ts; the API's routes import it from here.
export * from "./store/operations.js";
