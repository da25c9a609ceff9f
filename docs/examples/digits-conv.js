// Digit recognition with a small convolutional network (conv2d and max pooling), on the backend
// that can train it fastest. Each map task reads a sprite of 28x28 grayscale digits (one image per
// row of the PNG, as MNIST's sprite is laid out) with createImageBitmap, an OffscreenCanvas and
// getImageData, trains the network with its own hyperparameters and emits how well it does on the
// held-out images.
//
// It runs as it is on the stand-in digits the appliance ships (/static/examples/digits/, see
// digits_data.py); for MNIST, serve its sprite and labels (a byte per image) from an origin an admin
// allowed, with CORS, and change the two URLs below.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.scripts = [
  '/static/vendor/tfjs/tf.min.js',
  '/static/vendor/tfjs/tf-backend-wasm.min.js',
  '/static/vendor/tfjs/tf-backend-webgpu.min.js',
];

execution.setInputFn(async function input() {
  // One set of hyperparameters per map task.
  return [{filters: 4, epochs: 8}, {filters: 8, epochs: 8}];
});

execution.addStage(new MapStage(async function map(x) {
  const SPRITE_URL = '/static/examples/digits/sprite.png';
  const LABELS_URL = '/static/examples/digits/labels.bin';
  const SIDE = 28;
  const CLASSES = 10;

  // Training a convolutional network needs the gradients of convolution and pooling as well as the
  // forward kernels. TF.js 4.22's WebAssembly backend has no Conv2DBackpropFilter (the gradient of a
  // convolution's filters), so it cannot train this network: the cpu backend does.
  const TRAINING_KERNELS = ['Conv2D', 'Conv2DBackpropFilter', 'Conv2DBackpropInput', 'MaxPool', 'MaxPoolGrad'];

  // WebGPU on a GPU; else WebAssembly if it has every kernel training needs; else plain JavaScript.
  // A software WebGPU adapter (one the browser marks isFallbackAdapter, or SwiftShader, llvmpipe and
  // the like by name: the appliance's rule) is slower than either.
  const SOFTWARE_ADAPTERS = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render/i;
  async function pickBackend() {
    const adapter = self.navigator.gpu ? await navigator.gpu.requestAdapter() : null;
    const info = adapter?.info ?? {};
    const named = [info.vendor, info.architecture, info.description].join(' ');
    const software = info.isFallbackAdapter || SOFTWARE_ADAPTERS.test(named);
    if (adapter && !software && await tf.setBackend('webgpu')) return tf.getBackend();
    if (TRAINING_KERNELS.every(name => tf.getKernel(name, 'wasm'))) {
      tf.wasm.setWasmPaths(new URL('/static/vendor/tfjs/', self.location.href).href);
      if (await tf.setBackend('wasm').catch(() => false)) return tf.getBackend();
    }
    await tf.setBackend('cpu');
    return tf.getBackend();
  }

  // The sprite's images as floats in [0, 1] (the red channel: the image is gray), CHUNK rows at a
  // time: a whole MNIST sprite (65,000 rows) is taller than a canvas may be.
  const CHUNK = 64;
  async function loadImages() {
    const response = await fetch(SPRITE_URL);
    if (!response.ok) throw new Error(`${SPRITE_URL}: HTTP ${response.status}`);
    const bitmap = await createImageBitmap(await response.blob());
    const ctx = new OffscreenCanvas(bitmap.width, CHUNK).getContext('2d', {willReadFrequently: true});
    const images = new Float32Array(bitmap.width * bitmap.height);
    for (let top = 0; top < bitmap.height; top += CHUNK) {
      const rows = Math.min(CHUNK, bitmap.height - top);
      ctx.clearRect(0, 0, bitmap.width, CHUNK);
      ctx.drawImage(bitmap, 0, top, bitmap.width, rows, 0, 0, bitmap.width, rows);
      const rgba = ctx.getImageData(0, 0, bitmap.width, rows).data;
      for (let i = 0; i < rgba.length / 4; i++) images[top * bitmap.width + i] = rgba[4 * i] / 255;
    }
    return {images, count: images.length / (SIDE * SIDE)};
  }

  function model(filters) {
    const net = tf.sequential({layers: [
      tf.layers.conv2d({inputShape: [SIDE, SIDE, 1], filters, kernelSize: 5, activation: 'relu'}),
      tf.layers.maxPooling2d({poolSize: 4}),
      tf.layers.conv2d({filters: 2 * filters, kernelSize: 3, activation: 'relu'}),
      tf.layers.maxPooling2d({poolSize: 2}),
      tf.layers.flatten(),
      tf.layers.dense({units: CLASSES, activation: 'softmax'}),
    ]});
    net.compile({optimizer: tf.train.adam(0.01), loss: 'categoricalCrossentropy'});
    return net;
  }

  const backend = await pickBackend();
  const {images, count} = await loadImages();
  const labels = new Uint8Array(await (await fetch(LABELS_URL)).arrayBuffer());
  if (labels.length !== count) throw new Error(`${count} images but ${labels.length} labels`);
  const train = Math.floor(count * 0.8);
  const [trainXs, testXs] = tf.split(tf.tensor4d(images, [count, SIDE, SIDE, 1]), [train, count - train]);
  const [trainYs, testYs] = tf.split(tf.oneHot(tf.tensor1d(labels, 'int32'), CLASSES), [train, count - train]);

  for await (const [k, params] of x) {
    const net = model(params.filters);
    const started = performance.now();
    await net.fit(trainXs, trainYs, {epochs: params.epochs, batchSize: 16, shuffle: true});
    const seconds = (performance.now() - started) / 1000;
    const accuracy = tf.tidy(() => net.predict(testXs).argMax(-1).equal(testYs.argMax(-1)).mean().dataSync()[0]);
    context.log(`${params.filters} filters: accuracy ${accuracy.toFixed(3)} on ${backend} in ${seconds.toFixed(1)} s`);
    context.emit(k, {params, backend, accuracy, images: count, pixelSum: images.reduce((a, b) => a + b, 0), seconds});
  }
  await context.onComplete();
}));

execution.start(jobRunner);
