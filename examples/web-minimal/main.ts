// The smallest page that uses tokenmix: load the embedded model, classify an image.
import { createClassifier, type Prediction } from 'tokenmix';

const image = document.querySelector<HTMLImageElement>('#sample')!;
await image.decode();
const classifier = await createClassifier(); // in a worker; WebGPU or WebAssembly SIMD
const model = await classifier.loadModel(null); // null: the embedded Fashion-MNIST model
const top: Prediction[] = await classifier.classify(image, 3);
document.querySelector('#out')!.textContent = `${model.family}: ` + top.map((p) => `${p.label} ${(100 * p.probability).toFixed(1)} %`).join(', ');
document.body.dataset.result = JSON.stringify(top);
