// GraphiQL served by the binary: the key is asked for once per tab, then sent as the
// Authorization header of every request and in connection_init on /graphql/ws.
// No inline script (the page's Content-Security-Policy forbids it) and nothing fetched
// from anywhere but this server.
(function () {
  "use strict";
  var STORAGE = "hymical-graphiql-key";
  var form = document.getElementById("key-form");
  var mount = document.getElementById("graphiql");

  function start(key) {
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var fetcher = GraphiQL.createFetcher({
      url: "/graphql",
      subscriptionUrl: scheme + "//" + location.host + "/graphql/ws",
      headers: { Authorization: "Bearer " + key },
      wsConnectionParams: { Authorization: "Bearer " + key },
    });
    // A first query may come in the fragment: #query=<url-encoded document>.
    var initial = new URLSearchParams(location.hash.slice(1)).get("query");
    form.hidden = true;
    mount.hidden = false;
    var props = { fetcher: fetcher, defaultEditorToolsVisibility: false };
    if (initial) {
      props.query = initial;
    }
    ReactDOM.createRoot(mount).render(React.createElement(GraphiQL, props));
  }

  var saved = sessionStorage.getItem(STORAGE);
  if (saved) {
    start(saved);
    return;
  }
  form.hidden = false;
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var key = document.getElementById("key").value.trim();
    sessionStorage.setItem(STORAGE, key);
    start(key);
  });
})();
