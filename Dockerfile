# syntax=docker/dockerfile:1
FROM oven/bun:1 AS deps
WORKDIR /app
COPY package.json bun.lock ./
# --ignore-scripts: the postinstall step (the migrated database template) needs the sources; it runs below.
RUN bun install --frozen-lockfile --production --ignore-scripts

FROM oven/bun:1
WORKDIR /app
ENV NODE_ENV=production \
    PORT=8080 \
    HOST=0.0.0.0 \
    DATA_DIR=/data
COPY --from=deps /app/node_modules ./node_modules
COPY package.json bun.lock tsconfig.json ./
COPY src ./src
COPY scripts/pglite-template.ts ./scripts/
# A fresh /data starts from this migrated template instead of PGlite's initdb (docs/deployment.md, "Start-up").
RUN bun run scripts/pglite-template.ts
# The official image ships the unprivileged user "bun"; the embedded database lives in /data.
RUN mkdir -p /data && chown -R bun:bun /data
USER bun
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD bun -e "const r = await fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz'); process.exit(r.ok ? 0 : 1)" || exit 1
STOPSIGNAL SIGTERM
CMD ["bun", "run", "src/main.ts"]
