// The offline page (sw.js serves it when a page of the console cannot be fetched): back to the console
// as soon as the browser says the network is there again.
addEventListener("online", () => location.replace("/"));
