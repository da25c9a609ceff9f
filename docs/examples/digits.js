// Images in a job, and TF.js picking its fastest backend: each map task reads a sprite of 28x28
// grayscale digits (one image per row of the PNG, as MNIST's sprite is laid out) with
// createImageBitmap and an OffscreenCanvas, trains a small network with its own hyperparameters,
// and emits how well it does on the held-out images.
//
// It runs as it is on a sprite that comes with the appliance (/static/examples/digits/): 200 images
// that stand in for digits (digit d is a bar at column band d; digits_data.py made them), and their
// labels (one byte per image: the digit). For MNIST, serve its sprite and labels from an origin an
// admin allowed (Admin -> Settings, or PEERMR_FETCH_ORIGINS) with CORS and change the two URLs below.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
// TF.js and its WebAssembly and WebGPU backends, as the appliance ships them (static/vendor/tfjs).
execution.scripts = [
  '/static/vendor/tfjs/tf.min.js',
  '/static/vendor/tfjs/tf-backend-wasm.min.js',
  '/static/vendor/tfjs/tf-backend-webgpu.min.js',
];

execution.setInputFn(async function input() {
  // One set of hyperparameters per map task.
  return [{units: 32, epochs: 8}, {units: 64, epochs: 8}];
});

execution.addStage(new MapStage(async function map(x) {
  const SPRITE_URL = '/static/examples/digits/sprite.png';
  const LABELS_URL = '/static/examples/digits/labels.bin';
  const SIDE = 28;
  const PIXELS = SIDE * SIDE;
  const CLASSES = 10;

  // WebGPU on a GPU, else WebAssembly, else plain JavaScript. A software WebGPU adapter (one the
  // browser marks isFallbackAdapter, or SwiftShader, llvmpipe and the like by name: the appliance's
  // rule) is slower than the WebAssembly backend.
  const SOFTWARE_ADAPTERS = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render/i;
  async function pickBackend() {
    const adapter = self.navigator.gpu ? await navigator.gpu.requestAdapter() : null;
    const info = adapter?.info ?? {};
    const named = [info.vendor, info.architecture, info.description].join(' ');
    const software = info.isFallbackAdapter || SOFTWARE_ADAPTERS.test(named);
    if (adapter && !software && await tf.setBackend('webgpu')) return tf.getBackend();
    // The WebAssembly backend fetches its .wasm files from the appliance's vendored copy.
    tf.wasm.setWasmPaths(new URL('/static/vendor/tfjs/', self.location.href).href);
    if (await tf.setBackend('wasm').catch(() => false)) return tf.getBackend();
    await tf.setBackend('cpu');
    return tf.getBackend();
  }

  // Every image of the sprite as floats in [0, 1], read from the red channel (the image is gray),
  // through a canvas of CHUNK rows at a time: a whole MNIST sprite (65,000 rows) is taller than
  // a canvas may be.
  const CHUNK = 64;
  async function loadImages() {
    const response = await fetch(SPRITE_URL);
    if (!response.ok) throw new Error(`${SPRITE_URL}: HTTP ${response.status}`);
    const bitmap = await createImageBitmap(await response.blob());
    const canvas = new OffscreenCanvas(bitmap.width, CHUNK);
    const ctx = canvas.getContext('2d', {willReadFrequently: true});
    const images = new Float32Array(bitmap.width * bitmap.height);
    for (let top = 0; top < bitmap.height; top += CHUNK) {
      const rows = Math.min(CHUNK, bitmap.height - top);
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      ctx.drawImage(bitmap, 0, top, bitmap.width, rows, 0, 0, bitmap.width, rows);
      const rgba = ctx.getImageData(0, 0, bitmap.width, rows).data;
      const offset = top * bitmap.width;
      for (let i = 0; i < rgba.length / 4; i++) images[offset + i] = rgba[i * 4] / 255;
    }
    return {images, count: images.length / PIXELS};
  }

  // Dense layers: the WebAssembly backend of TF.js 4.22 has no gradient kernels for convolutions
  // (Conv2DBackpropFilter), so a convolutional network trains on WebGPU or plain JavaScript only.
  function model(units) {
    const net = tf.sequential();
    net.add(tf.layers.flatten({inputShape: [SIDE, SIDE, 1]}));
    net.add(tf.layers.dense({units, activation: 'relu'}));
    net.add(tf.layers.dense({units: CLASSES, activation: 'softmax'}));
    net.compile({optimizer: tf.train.adam(0.01), loss: 'categoricalCrossentropy', metrics: ['accuracy']});
    return net;
  }

  const backend = await pickBackend();
  const {images, count} = await loadImages();
  const labels = new Uint8Array(await (await fetch(LABELS_URL)).arrayBuffer());
  if (labels.length !== count) throw new Error(`${count} images but ${labels.length} labels`);
  const pixelSum = images.reduce((a, b) => a + b, 0);

  const train = Math.floor(count * 0.8);
  const xs = tf.tensor4d(images, [count, SIDE, SIDE, 1]);
  const ys = tf.oneHot(tf.tensor1d(labels, 'int32'), CLASSES);
  const [trainXs, testXs] = tf.split(xs, [train, count - train]);
  const [trainYs, testYs] = tf.split(ys, [train, count - train]);

  for await (const [k, params] of x) {
    const net = model(params.units);
    const started = performance.now();
    await net.fit(trainXs, trainYs, {epochs: params.epochs, batchSize: 32, shuffle: true});
    const seconds = (performance.now() - started) / 1000;
    const predicted = net.predict(testXs).argMax(-1);
    const accuracy = (await predicted.equal(testYs.argMax(-1)).mean().data())[0];
    context.log(`${params.units} units: accuracy ${accuracy.toFixed(3)} on ${backend} in ${seconds.toFixed(1)} s`);
    context.emit(k, {params, backend, accuracy, images: count, pixelSum, seconds});
  }
  await context.onComplete();
}));

execution.start(jobRunner);
