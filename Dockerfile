# The operator image: Node.js 24 on Debian bookworm, production dependencies only, non-root, ipmitool for
# the native IPMI agent. (Built by users and CI; the development machines have no Docker engine.
# test/lab/prod-install.test.ts checks what this image runs: the build output with production dependencies
# only, installed into an empty directory, against the lab.)
#
#   docker build -t ghcr.io/stockade-io/stockade:0.1.0 .
#   docker build --build-arg WITH_FENCE_AGENTS=1 -t ghcr.io/stockade-io/stockade:0.1.0-fence-agents .
#
# WITH_FENCE_AGENTS=1 adds Debian's ClusterLabs fence agents (fence_ipmilan, fence_redfish, fence_aws, …) for
# FenceAgents of type fenceAgent; see manifests/README.md for why they run inside the operator's container.
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: the `node` devDependency would download a second Node.js; the image's own compiles.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json

FROM ${NODE_IMAGE}
ARG WITH_FENCE_AGENTS=0
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates ipmitool \
    && if [ "$WITH_FENCE_AGENTS" = "1" ]; then apt-get install -y --no-install-recommends fence-agents; fi \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only: no TypeScript, ESLint, Prettier or the `node` package in the image.
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /src/dist ./dist
ENV NODE_ENV=production
# The restricted Pod Security profile's usual non-root identity (manifests/03-deployment.yaml runs as it too).
USER 65532:65532
EXPOSE 8080 8081
# V8 flags: src/runtime/node-flags.ts says why (the young generation under a 512Mi limit).
ENTRYPOINT ["node", "--max-semi-space-size=16", "dist/main.js"]
