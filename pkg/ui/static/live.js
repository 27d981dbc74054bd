// Each element with a data-live URL follows it: the server sends the
// element's HTML, rendered from a watch of the API, as server-sent events,
// and "end" once there is nothing more to follow.
for (const el of document.querySelectorAll("[data-live]")) {
  const source = new EventSource(el.dataset.live);
  const show = (e) => { el.innerHTML = e.data; };
  source.addEventListener("progress", show);
  source.addEventListener("end", (e) => { show(e); source.close(); });
}
