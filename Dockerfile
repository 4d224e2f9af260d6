# syntax=docker/dockerfile:1
# The service's image (docs/deployment.md, "The container image"). Its base is a build argument:
# the official Bun image by default, or any image with Bun at /usr/local/bin/bun and an unprivileged
# user "bun" (uid 1000), such as the local one scripts/container/check.ts makes where no registry
# can be reached.
ARG BUN_IMAGE=oven/bun:1

# The locked production dependencies only (--ignore-scripts: the postinstall step, the migrated
# database template, needs the sources; it runs in the build stage).
FROM ${BUN_IMAGE} AS deps
WORKDIR /app
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production --ignore-scripts

# What is made once at build time rather than at every start: the console's script, bundled from
# src/console, and the migrated template a fresh embedded data directory is copied from.
FROM deps AS build
COPY tsconfig.json ./
COPY src ./src
COPY scripts/pglite-template.ts scripts/console-bundle.ts ./scripts/
RUN bun run scripts/console-bundle.ts dist/console.js \
 && bun run scripts/pglite-template.ts \
 && chmod -R a+rX node_modules/.cache \
 && rm -rf src/console
# Only what runs: Mermaid's browser bundle is served as a file (its other builds are never loaded),
# and TypeScript and Bun's type definitions (installed as peers) are for type checking.
RUN find node_modules/mermaid -mindepth 1 -maxdepth 1 ! -name dist ! -name package.json -exec rm -rf {} + \
 && find node_modules/mermaid/dist -mindepth 1 -maxdepth 1 ! -name mermaid.min.js -exec rm -rf {} + \
 && rm -rf node_modules/typescript node_modules/bun-types node_modules/@types

FROM ${BUN_IMAGE}
WORKDIR /app
ENV NODE_ENV=production \
    PORT=8080 \
    HOST=0.0.0.0 \
    DATA_DIR=/data \
    CONSOLE_BUNDLE=/app/dist/console.js
# Owned by root and read-only to the service: only /data is written.
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/src ./src
COPY package.json tsconfig.json ./
RUN mkdir -p /data && chown bun:bun /data
USER bun
VOLUME ["/data"]
EXPOSE 8080
# Liveness: /healthz answers while the process serves HTTP (readiness, /readyz, also needs the
# database and Redis). Worker-only containers serve no HTTP: run them with the check disabled.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bun", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
STOPSIGNAL SIGTERM
CMD ["bun", "run", "src/main.ts"]
