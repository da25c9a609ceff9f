// Four-stage character count: map lines to characters, count them, regroup the counts by
// character class (letter, digit, space, other) and total each class.
//
// The input function returns the lines themselves here; to count the characters of your own
// files, return their URLs instead and fetch them in the first map (see wordcount.js).
const execution = new JobExecution(storageType = 'pmrfs');
execution.workerCount = 4;

execution.setInputFn(async function input() {
  const lines = [];
  for (let i = 0; i < 1000; i++) lines.push(`line ${i}: the quick brown fox jumps over the lazy dog`);
  return lines;
});

// 1. map: every character of every line
const chars = new MapStage(async function map(x) {
  for (const [, line] of x) {
    for (const ch of line) context.emit(ch, 1);
  }
  await context.onComplete();
});
chars.contentType = 'text/csv';
execution.addStage(chars);

// 2. reduce: the count of each character
const counts = new ReduceStage(async function reduce(keyToValues) {
  for (const ch in keyToValues) context.emit(ch, keyToValues[ch].reduce((a, b) => a + b, 0));
  await context.onComplete();
});
counts.timeout = 30 * 60;
execution.addStage(counts);

// 3. map: re-key each character's count by its class
execution.addStage(new MapStage(async function map(x) {
  for (const [ch, n] of x) {
    const cls = /\p{L}/u.test(ch) ? 'letter' : /\d/.test(ch) ? 'digit' : /\s/.test(ch) ? 'space' : 'other';
    context.emit(cls, n);
  }
  await context.onComplete();
}));

// 4. reduce: the total per class
execution.addStage(new ReduceStage(async function reduce(keyToValues) {
  for (const cls in keyToValues) context.emit(cls, keyToValues[cls].reduce((a, b) => a + b, 0));
  await context.onComplete();
}));

execution.start(jobRunner);
