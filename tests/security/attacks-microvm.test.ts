// The attack table's microVM part (tests/security/table.ts): Carol's microVM, with a container of Alice's as
// the other tenant of its cases. The containers' part is attacks.test.ts, beside this one.
import { attackTable } from "./table.js";

attackTable("microvm");
