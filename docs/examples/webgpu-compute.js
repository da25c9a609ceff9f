// A WebGPU compute job: each map task runs a WGSL compute shader over its numbers on the worker's
// GPU (y = x * x + 0.5, in float32) and emits each result under its input's index.
//
// gpu: only workers with WebGPU take the run; gpuRequirements narrows them down (adapter info
// values, features as a list or as {name: true}, minimum limits). A software adapter (SwiftShader
// and the like) counts only when an admin allows it (Admin -> Settings).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 2;
execution.gpu = true;
execution.gpuRequirements = {
  features: ['float32-filterable'],
  limits: {maxComputeWorkgroupSizeX: 64, maxStorageBufferBindingSize: 1 << 20},
};

execution.setInputFn(async function input() {
  return Array.from({length: 1000}, (_, i) => i / 8);
});

execution.addStage(new MapStage(async function map(x) {
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error('this worker has no WebGPU adapter');
  const device = await adapter.requestDevice();
  const info = adapter.info;
  // A software adapter (a CPU implementation), by the appliance's rule: the browser marks it
  // isFallbackAdapter, or its name is SwiftShader, llvmpipe or the like.
  const SOFTWARE_ADAPTERS = /swiftshader|llvmpipe|lavapipe|softpipe|microsoft basic render/i;
  const software = info.isFallbackAdapter || SOFTWARE_ADAPTERS.test([info.vendor, info.architecture, info.description].join(' '));
  context.log(`adapter: ${info.vendor} ${info.architecture}${software ? ' (software)' : ''}`);

  const records = Array.from(x);
  const indexes = records.map(([index]) => index);
  const input = new Float32Array(records.map(([, value]) => value));
  const bytes = input.byteLength;
  const storage = device.createBuffer({size: bytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC});
  const readback = device.createBuffer({size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  device.queue.writeBuffer(storage, 0, input);

  const module = device.createShaderModule({code: `
    @group(0) @binding(0) var<storage, read_write> values: array<f32>;

    @compute @workgroup_size(64)
    fn main(@builtin(global_invocation_id) id: vec3<u32>) {
      if (id.x < arrayLength(&values)) {
        values[id.x] = values[id.x] * values[id.x] + 0.5;
      }
    }
  `});
  const pipeline = device.createComputePipeline({layout: 'auto', compute: {module, entryPoint: 'main'}});
  const bindings = device.createBindGroup({layout: pipeline.getBindGroupLayout(0), entries: [{binding: 0, resource: {buffer: storage}}]});

  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindings);
  pass.dispatchWorkgroups(Math.ceil(input.length / 64));
  pass.end();
  encoder.copyBufferToBuffer(storage, 0, readback, 0, bytes);
  device.queue.submit([encoder.finish()]);

  await readback.mapAsync(GPUMapMode.READ);
  const output = new Float32Array(readback.getMappedRange().slice(0));
  readback.unmap();
  device.destroy();
  output.forEach((value, i) => context.emit(indexes[i], value));
  await context.onComplete();
}));

execution.start(jobRunner);
