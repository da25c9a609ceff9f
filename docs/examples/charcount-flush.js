// Character count with flush: the map cuts its output into a new blob every 10,000 emits, so a
// large input never sits in one worker's memory at once. The answer is the same as without.
//
// Change the input function to return your own lines, or URLs to fetch in the map.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;

execution.setInputFn(async function input() {
  const lines = [];
  for (let i = 0; i < 2000; i++) lines.push(`row ${i} of the sample text`);
  return lines;
});

execution.addStage(new MapStage(async function map(x) {
  let emitted = 0;
  for await (const [, line] of x) {
    for (const ch of line) {
      context.emit(ch, 1);
      if (++emitted % 10000 === 0) await context.flush();
    }
  }
  await context.onComplete();
}));

execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const ch in keyToValues) context.emit(ch, keyToValues[ch].reduce((a, b) => a + b, 0));
  await context.onComplete();
}));

execution.start(jobRunner);
