// Word count: how often each word appears in a set of text files.
//
// It runs as it is: the four small files it counts come with the appliance (/static/examples/).
// To run it on your data, change the URLs the input function returns. They must be on the
// appliance (e.g. PMRFS) or on an origin an admin allowed in Admin -> Settings (or
// PEERMR_FETCH_ORIGINS), and that server must answer cross-origin GETs (CORS).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;

execution.setInputFn(async function input() {
  return [
    '/static/examples/corpus/part-0.txt',
    '/static/examples/corpus/part-1.txt',
    '/static/examples/corpus/part-2.txt',
    '/static/examples/corpus/part-3.txt',
  ];
});

execution.addStage(new MapStage(async function map(x) {
  for await (const kv of x) {
    const url = kv[1];
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    const text = await response.text();
    for (const word of text.split(/\s+/)) {
      if (word) context.emit(word, 1);
    }
  }
  await context.onComplete();
}));

execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const word in keyToValues) {
    context.emit(word, keyToValues[word].reduce((a, b) => a + b, 0));
  }
  await context.onComplete();
}));

execution.start(jobRunner);
