/** Reported to the engine; bumped with the plugin's resource schemas. */
export const PLUGIN_VERSION = "0.1.0";
