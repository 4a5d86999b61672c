// The attack table's containers part (tests/security/table.ts): Alice's claimed and Bob's cold sandbox, the
// host's controls, and the cross-tenant cases. Carol's microVM is attacks-microvm.test.ts, beside this one.
import { attackTable } from "./table.js";

attackTable("containers");
