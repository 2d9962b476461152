// A tiny web app using only Node's standard library.
const http = require("node:http");

function greeting(name) {
  return `Hello, ${name || "world"}!`;
}

function handle(req, res) {
  if (req.url === "/api/hello") {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ message: greeting("") }));
    return;
  }
  res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
  res.end(`<!doctype html><title>Hello</title><h1>${greeting("")}</h1>`);
}

if (require.main === module) {
  const port = Number(process.env.PORT || 8000);
  http.createServer(handle).listen(port, "127.0.0.1", () => {
    console.log(`listening on 127.0.0.1:${port}`);
  });
}

module.exports = { greeting, handle };
