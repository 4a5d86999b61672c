// The exec API's audit (table sandbox_execs) is the store's (store/audit.ts); the exec routes import it from here.
export {
  listExecs,
  recordExecEnd,
  recordExecStart,
  type ExecAuditEntry,
  type ExecEnd,
  type ExecStart,
} from "../store/audit.js";
