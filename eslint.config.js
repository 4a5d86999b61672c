import pulumi from "@pulumi/eslint-plugin";
import tseslint from "typescript-eslint";
import { layerRules } from "./eslint.layers.js";

export default tseslint.config(
  // runtime/api/e2b/envd/gen: protoc-gen-es's output (npm run envd:proto), kept as it makes it.
  {
    ignores: [
      "node_modules/**",
      "dist/**",
      "sdk/dist/**",
      ".data/**",
      "test-artifacts/**",
      "runtime/api/e2b/envd/gen/**",
    ],
  },
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { pulumi },
    rules: {
      "pulumi/no-output-in-template-literal": "error",
      "pulumi/no-output-instance-in-template-literal": "error",
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/switch-exhaustiveness-check": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
    },
  },
  // Imports go down the layers only (lib → provider → components → stacks → runtime).
  ...layerRules,
);
