"""What bench/previews.py serves and proxies with: the minimal Node app in the sandbox,
its workspace.toml, and nginx with one worker proxying inside the same namespace."""

NODE_SERVER = """const http = require("node:http");
http.createServer((req, res) => {
  res.writeHead(200, {"Content-Type": "text/plain", "Content-Length": "3"});
  res.end("ok\\n");
}).listen(8000, "127.0.0.1", () => console.log("listening"));
"""
NGINX_CONF = """worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  upstream app {{ server 127.0.0.1:8000; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://app; proxy_http_version 1.1;
                 proxy_set_header Connection ""; proxy_buffering off; }}
  }}
}}
"""
NGINX_PORT = 18999
NODE_TOML = '[preview]\ncommand = "node server.js"\nport = 8000\nhealth_path = "/"\n'
