# The operator image: Node.js 24 and ipmitool (for the native IPMI agent) with exactly their shared libraries,
# production dependencies only, non-root, no shell. (test/lab/operator-image.test.ts builds it with
# `npm run image` and runs it; test/lab/prod-install.test.ts checks the same build output against the lab.)
#
#   docker build -t ghcr.io/stockade-io/stockade:0.1.0 .
#   docker build --build-arg WITH_FENCE_AGENTS=1 -t ghcr.io/stockade-io/stockade:0.1.0-fence-agents .
#
# WITH_FENCE_AGENTS=1 adds Debian's ClusterLabs fence agents (fence_ipmilan, fence_redfish, fence_aws, …) for
# FenceAgents of type fenceAgent; see manifests/README.md for why they run inside the operator's container.
# That variant keeps the whole NODE_IMAGE (Python, a shell, apt) so users can add agents of their own.
# Build with BuildKit (the default of current Docker): it builds only the stages the variant uses.
ARG NODE_IMAGE=node:24-bookworm-slim
ARG WITH_FENCE_AGENTS=0

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: the `node` devDependency would download a second Node.js; the image's own compiles.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json

FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only: no TypeScript, ESLint, Prettier or the `node` package in the image.
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY tools/image/prune-node-modules.mjs /usr/local/lib/
RUN node /usr/local/lib/prune-node-modules.mjs node_modules

# The runtime's root filesystem, assembled here: binutils only to strip node.
FROM ${NODE_IMAGE} AS rootfs
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates ipmitool binutils \
    && rm -rf /var/lib/apt/lists/*
COPY tools/image/lean-rootfs.sh /usr/local/bin/
RUN lean-rootfs.sh /rootfs

FROM scratch AS runtime-0
COPY --from=rootfs /rootfs /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

FROM ${NODE_IMAGE} AS runtime-1
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates ipmitool fence-agents \
    && rm -rf /var/lib/apt/lists/*

FROM runtime-${WITH_FENCE_AGENTS}
WORKDIR /app
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /src/dist ./dist
ENV NODE_ENV=production
# The restricted Pod Security profile's usual non-root identity (manifests/03-deployment.yaml runs as it too).
USER 65532:65532
EXPOSE 8080 8081
# V8 flags: src/runtime/node-flags.ts says why (the young generation under a 512Mi limit).
ENTRYPOINT ["node", "--max-semi-space-size=16", "dist/main.js"]
