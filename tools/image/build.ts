// npm run image [-- --rebuild]: builds the operator image (or finds it cached) and says where it is.
import { statSync } from "node:fs";
import { operatorImage } from "../../lab/operator-image.ts";

const rebuild = process.argv.includes("--rebuild");
const started = Date.now();
try {
  const img = await operatorImage({ rebuild, log: (m) => console.error(`image: [${((Date.now() - started) / 1000).toFixed(1)} s] ${m}`) });
  const mb = (statSync(img.tar).size / 1e6).toFixed(0);
  for (const r of img.refs) console.log(r);
  console.log(`${img.tar} (${mb} MB) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
} catch (e) {
  console.error(`image: ${(e as Error).message}`);
  process.exit(1);
}
