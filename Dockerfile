# Operator image: Node.js 24 on Debian, production dependencies only, non-root, ipmitool for the
# native IPMI agent. (Built by users; the development machines have no Docker engine.)
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
RUN npm ci --ignore-scripts
COPY src ./src
RUN npx tsc -p tsconfig.build.json

FROM node:24-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ipmitool ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /src/dist ./dist
USER 65532:65532
# The entry point (dist/main.js) arrives with the operator itself.
ENTRYPOINT ["node", "dist/main.js"]
