// The web console's service worker (registered by main.ts; served at /sw.js, so its scope is the whole
// console). What it keeps, and what it never does:
// - the offline page and what it shows, fetched at install: a page of the console that cannot be fetched
//   (no network) gets it instead of the browser's error;
// - the console's assets (/assets/*: content-hashed, never changing meaning), kept as they are fetched and
//   served from the cache first, so an installed console opens at once; only the newest ASSETS_KEPT stay;
// - never the API (/auth, /projects, ...), nor anything of another origin (the terminal's WebSockets): those
//   go to the network as the page sent them, and a response carrying a user's data is never stored.
const VERSION = 1;
const SHELL = `agent-sandbox-shell-v${VERSION}`;
const ASSETS = `agent-sandbox-assets-v${VERSION}`;
const OFFLINE_PAGE = "/offline.html";
const PRECACHED = [OFFLINE_PAGE, "/offline.js", "/icons/icon-192.png", "/icons/icon.svg"];
const ASSETS_KEPT = 40;

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(SHELL)
      .then((cache) => cache.addAll(PRECACHED))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) =>
        Promise.all(
          names.filter((name) => name !== SHELL && name !== ASSETS).map((name) => caches.delete(name)),
        ),
      )
      .then(() => self.clients.claim()),
  );
});

/** The newest ASSETS_KEPT assets stay (a cache's keys are in the order they were put). */
async function prune(cache) {
  const keys = await cache.keys();
  await Promise.all(keys.slice(0, Math.max(0, keys.length - ASSETS_KEPT)).map((key) => cache.delete(key)));
}

async function asset(request) {
  const cache = await caches.open(ASSETS);
  const kept = await cache.match(request);
  if (kept) return kept;
  const response = await fetch(request);
  if (response.ok) {
    await cache.put(request, response.clone());
    await prune(cache);
  }
  return response;
}

async function page(request) {
  try {
    return await fetch(request);
  } catch {
    const offline = await caches.match(OFFLINE_PAGE);
    return offline ?? Response.error();
  }
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET") return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  if (request.mode === "navigate") event.respondWith(page(request));
  else if (url.pathname.startsWith("/assets/")) event.respondWith(asset(request));
});
