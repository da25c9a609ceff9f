// Word count: the input function hands out lines of text, the map stage
// counts the words of its lines, and the reduce stage adds up the counts of
// each word. The output is one [word, count] record per word.
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;
execution.groupCount = 1;
execution.privateMode = false;
execution.saveIntermediateOutput = false;

execution.setInputFn(async function input() {
  // Your data goes here. To read a file instead (its origin must be allowed by the admin):
  //   const text = await (await fetch('https://data.example.com/book.txt')).text();
  //   return text.split('\n');
  return [
    'It was the best of times, it was the worst of times,',
    'it was the age of wisdom, it was the age of foolishness,',
    'it was the epoch of belief, it was the epoch of incredulity,',
    'it was the season of Light, it was the season of Darkness,',
    'it was the spring of hope, it was the winter of despair.',
  ];
}, 'application/json');

const countWords = new MapStage(async function map(x) {
  // x holds this worker's share of the input as [index, line] records.
  for await (const [, line] of x) {
    for (const word of line.toLowerCase().split(/[^a-z']+/)) {
      if (word) {
        context.emit(word, 1);
      }
    }
  }
  await context.onComplete();
});
countWords.contentType = 'application/json';
countWords.timeout = 30 * 60; // seconds
execution.addStage(countWords);

execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  // Every count emitted for a word arrives at the same worker.
  for (const word in keyToValues) {
    context.emit(word, keyToValues[word].reduce((sum, n) => sum + n, 0));
  }
  await context.onComplete();
}));

execution.start(jobRunner);
