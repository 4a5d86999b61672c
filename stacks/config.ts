// The stack file's config (`agent-sandbox:<key>` in Pulumi.<stack>.yaml): one zod schema per namespace, each
// in its own file under config/, and the whole file's schema and reader in config/stack.ts. Importers use
// this index.
export { PROJECT } from "./config/shared.js";
export { TargetConfig } from "./config/target.js";
export { HostConfig } from "./config/host.js";
export {
  consoleOriginsOf,
  E2bConfig,
  RateLimit,
  REGISTRATION_MODES,
  type RegistrationMode,
  RuntimeConfig,
  SshGatewayConfig,
  TelemetryConfig,
} from "./config/runtime.js";
export { CredentialGatewayConfig, TenantsConfig, WarmPoolConfig } from "./config/tenants.js";
export {
  GCP_MACHINE_TYPE,
  GCP_PROJECT_ID,
  GCP_REGION,
  GcpConfig,
  gcpFirewallProblems,
  gcpMicroVm,
  gcpPublicPorts,
  GkeConfig,
  isIpv4Cidr,
  isNetworkAddress,
  NESTED_VIRTUALIZATION_SERIES,
} from "./config/gcp.js";
export { parseStackConfig, readStackConfigFile, StackConfig, StackConfigError } from "./config/stack.js";
