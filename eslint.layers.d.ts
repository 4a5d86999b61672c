// Types of eslint.layers.js (ESLint loads its config as JavaScript; the layering test imports it too).
import type { Linter } from "eslint";

export declare const LAYERS: readonly { readonly layer: string; readonly forbidden: readonly string[] }[];
export declare const layerRules: Linter.Config[];
export declare const RUNTIME_LAYERS: readonly {
  readonly layer: string;
  readonly forbidden: readonly string[];
}[];
export declare const RUNTIME_FOUNDATIONS: readonly string[];
