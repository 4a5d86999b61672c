// The database layer lives in store/db.ts; the API's routes import it from here.
export * from "./store/db.js";
