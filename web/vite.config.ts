// The web console's build: `npm run build:web` writes dist/web, which the runtime serves at `/`
// (runtime/api/web-console.ts). `npx vite --config web/vite.config.ts` serves it with hot reload against
// a runtime on 127.0.0.1:8000.
import { defineConfig } from "vite";

const API = "http://127.0.0.1:8000";

export default defineConfig({
  root: new URL(".", import.meta.url).pathname,
  // Asset URLs are absolute (/assets/...): the console is served at the origin's root, and a hash route
  // such as #/projects/<id> never changes the path.
  base: "/",
  // The installable console's files at fixed URLs (manifest, service worker, offline page, icons): copied as
  // they are, and served by the runtime by name (runtime/api/web-console.ts, PUBLIC_FILES).
  publicDir: "public",
  build: {
    outDir: new URL("../dist/web", import.meta.url).pathname,
    emptyOutDir: true,
    target: "es2022",
    // The runtime sends hashed assets as immutable; the hash in the name is what makes that safe.
    assetsDir: "assets",
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
  server: {
    host: "127.0.0.1",
    proxy: { "/auth": API, "/projects": API, "/healthz": API },
  },
});
