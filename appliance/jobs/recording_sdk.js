// Recording implementation of the PeerMR job SDK (docs/sdk.md), used when a job is saved.
//
// appliance/jobs/spec.py evaluates this file in a fresh V8 isolate, then the job script, then
// asks for the record. The script's top level runs; the job's functions do not: the SDK only
// remembers what the script declares (the execution's fields, the input function, the stages,
// and where in the script each was set) so that the spec can be validated and stored. Functions
// are kept as their source text (fn.toString()), which is what the sandbox receives later.
//
// The completion value of this file is the object {run, collect}:
//   run(source)  evaluates the job script as sloppy-mode global code named job.js (so stack
//                frames and syntax errors name job.js with the script's own line numbers);
//   collect()    returns the record as JSON text.
// Every location recorded is {line, column} in job.js, or null when unknown.
(function () {
  'use strict';

  const JOB_FILE = 'job.js';
  const STAGE_FIELDS = ['contentType', 'timeout', 'combine', 'chunks'];
  const EXECUTION_FIELDS = [
    'storageType',
    'workerCount',
    'groupCount',
    'privateMode',
    'gpu',
    'gpuRequirements',
    'scripts',
    'wasmBinaries',
    'saveIntermediateOutput',
    'seed',
    'staleness',
    'queueTimeout',
    'speculation',
    'validation',
  ];

  // Builtins the recorder uses, kept before the job script can replace them.
  const globalEval = globalThis.eval;
  const stringify = JSON.stringify;
  const objectKeys = Object.keys;
  const objectToString = Object.prototype.toString;
  const isArray = Array.isArray;
  const getPrototypeOf = Object.getPrototypeOf;
  const functionToString = Function.prototype.toString;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const NativeError = Error;
  const NativeFunction = Function;
  const NativePromise = Promise;
  const NativeSet = Set;
  const isFinite = Number.isFinite;

  const state = {
    started: null, // the execution that start(jobRunner) was called on
    startAt: null,
    record: null, // snapshot taken by start()
  };

  // -- where the job script is --------------------------------------------------------------

  function withStackDefaults(body) {
    // The script may have changed Error.stackTraceLimit or Error.prepareStackTrace; the
    // recorder needs V8's own behaviour while it looks at a stack.
    const savedPrepare = NativeError.prepareStackTrace;
    const savedLimit = NativeError.stackTraceLimit;
    try {
      NativeError.stackTraceLimit = 100;
      return body();
    } finally {
      try {
        NativeError.prepareStackTrace = savedPrepare;
        NativeError.stackTraceLimit = savedLimit;
      } catch (ignored) {
        // Error was frozen by the script: nothing was changed either.
      }
    }
  }

  // The innermost frame of the job script on the current stack: the SDK call being made.
  function callerLocation() {
    try {
      return withStackDefaults(() => {
        NativeError.prepareStackTrace = (error, callSites) => callSites;
        const holder = {};
        NativeError.captureStackTrace(holder, callerLocation);
        const sites = holder.stack;
        if (!isArray(sites)) return null;
        for (const site of sites) {
          if (site.getScriptNameOrSourceURL() === JOB_FILE) {
            return {line: site.getLineNumber(), column: site.getColumnNumber()};
          }
        }
        return null;
      });
    } catch (ignored) {
      return null;
    }
  }

  // Throw an error whose stack names the job script's line, whatever the script did to Error.
  function fail(ErrorType, message) {
    let error;
    try {
      error = withStackDefaults(() => {
        NativeError.prepareStackTrace = undefined;
        const made = new ErrorType(message);
        void made.stack; // format the stack now, with the defaults
        return made;
      });
    } catch (ignored) {
      error = new ErrorType(message);
    }
    throw error;
  }

  function describe(value) {
    if (typeof value === 'string') return stringify(value.length > 60 ? value.slice(0, 57) + '...' : value);
    if (typeof value === 'function') return 'a function';
    if (value === null || typeof value !== 'object') return String(value);
    if (isArray(value)) return 'an array';
    return 'an object';
  }

  // -- values as JSON ---------------------------------------------------------------------------

  // A JSON-safe copy of what the script assigned. Values JSON cannot carry become {__js: "..."}
  // with a description, so that spec.py can say what was wrong with them.
  function plain(value, seen) {
    switch (typeof value) {
      case 'string':
      case 'boolean':
        return value;
      case 'number':
        return isFinite(value) ? value : {__js: String(value)};
      case 'undefined':
        return {__js: 'undefined'};
      case 'bigint':
        return {__js: String(value) + 'n'};
      case 'function':
        return {__js: 'a function'};
      case 'symbol':
        return {__js: 'a symbol'};
    }
    if (value === null) return null;
    if (seen.has(value)) return {__js: 'a circular reference'};
    seen.add(value);
    try {
      if (isArray(value)) {
        const out = [];
        for (let i = 0; i < value.length; i++) out.push(plain(value[i], seen));
        return out;
      }
      const tag = objectToString.call(value);
      if (tag !== '[object Object]') return {__js: 'a ' + tag.slice(8, -1) + ' object'};
      const out = {};
      for (const key of objectKeys(value)) out[key] = plain(value[key], seen);
      return out;
    } finally {
      seen.delete(value);
    }
  }

  function field(value, at) {
    return {value: plain(value, new NativeSet()), at};
  }

  // -- functions as source ----------------------------------------------------------------------

  // The source text of a job function, checked to read back as a function expression (which is
  // how the sandbox defines it). Nothing is run: the check only compiles.
  function sourceOf(fn, what) {
    if (typeof fn !== 'function') fail(TypeError, `${what} needs a function (got ${describe(fn)})`);
    const kind = getPrototypeOf(fn) && getPrototypeOf(fn).constructor && getPrototypeOf(fn).constructor.name;
    if (kind === 'GeneratorFunction' || kind === 'AsyncGeneratorFunction') {
      fail(TypeError, `${what} needs a function or an async function, not a generator function`);
    }
    const source = functionToString.call(fn);
    if (/\{\s*\[native code\]\s*\}\s*$/.test(source)) {
      fail(TypeError, `${what} needs a function written in the job script (got a built-in or bound function)`);
    }
    if (/^class\b/.test(source)) fail(TypeError, `${what} needs a function, not a class`);
    try {
      new NativeFunction('return (' + source + '\n);');
    } catch (ignored) {
      fail(
        TypeError,
        `${what} needs a function expression, an arrow function or a function declaration ` +
          '(a method written inside an object or class cannot be sent to workers on its own)',
      );
    }
    return source;
  }

  // -- the SDK ----------------------------------------------------------------------------------

  function refuseAfterStart(what) {
    if (state.started !== null) {
      const where = state.startAt ? ` on line ${state.startAt.line}` : '';
      fail(Error, `${what} after execution.start(jobRunner) was called${where}; set up the job before starting it`);
    }
  }

  const stages = new WeakMap(); // stage object -> its record
  const executions = new WeakMap(); // execution object -> its record

  class Stage {
    constructor(kind, className, fn) {
      const source = sourceOf(fn, `new ${className}(fn)`);
      stages.set(this, {
        kind,
        className,
        source,
        at: callerLocation(),
        contentType: {value: 'application/json', at: null},
        timeout: {value: 3600, at: null},
        combine: {value: false, at: null},
        chunks: {value: 'auto', at: null},
      });
    }
  }
  for (const name of STAGE_FIELDS) {
    defineProperty(Stage.prototype, name, {
      get() {
        const record = stages.get(this);
        return record ? record[name].value : undefined;
      },
      set(value) {
        const record = stages.get(this);
        if (!record) fail(TypeError, `${name} can only be set on a MapStage or ReduceStage`);
        refuseAfterStart(`stage.${name} was set`);
        record[name] = {value, at: callerLocation()};
      },
      enumerable: true,
      configurable: false,
    });
  }

  class MapStage extends Stage {
    constructor(fn) {
      super('map', 'MapStage', fn);
    }
  }

  class ReduceStage extends Stage {
    constructor(fn) {
      super('reduce', 'ReduceStage', fn);
    }
  }

  const jobRunner = freeze({
    toString() {
      return '[jobRunner]';
    },
  });

  class JobExecution {
    constructor(storageType) {
      const at = callerLocation();
      const fields = {
        storageType: {value: storageType === undefined ? 'pmrfs' : storageType, at},
        workerCount: {value: 4, at: null},
        groupCount: {value: 1, at: null},
        privateMode: {value: false, at: null},
        gpu: {value: false, at: null},
        gpuRequirements: {value: {info: {}, features: {}, limits: {}}, at: null},
        scripts: {value: [], at: null},
        wasmBinaries: {value: [], at: null},
        saveIntermediateOutput: {value: true, at: null},
        seed: {value: undefined, at: null},
        staleness: {value: undefined, at: null},
        queueTimeout: {value: undefined, at: null},
        speculation: {value: true, at: null},
        validation: {value: undefined, at: null},
      };
      executions.set(this, {fields, input: null, stages: []});
    }

    setInputFn(fn, contentType = 'application/json') {
      const record = executions.get(this);
      if (!record) fail(TypeError, 'setInputFn must be called on a JobExecution');
      refuseAfterStart('execution.setInputFn() was called');
      const at = callerLocation();
      const source = sourceOf(fn, 'execution.setInputFn(fn)');
      record.input = {source, at, contentType: {value: contentType, at}};
    }

    addStage(stage) {
      const record = executions.get(this);
      if (!record) fail(TypeError, 'addStage must be called on a JobExecution');
      refuseAfterStart('execution.addStage() was called');
      const stageRecord = stage !== null && typeof stage === 'object' ? stages.get(stage) : undefined;
      if (!stageRecord) {
        fail(TypeError, `execution.addStage() needs a MapStage or a ReduceStage (got ${describe(stage)})`);
      }
      record.stages.push({stage: stageRecord, at: callerLocation()});
    }

    start(runner) {
      const record = executions.get(this);
      if (!record) fail(TypeError, 'start must be called on a JobExecution');
      if (state.started !== null) {
        const where = state.startAt ? ` on line ${state.startAt.line}` : '';
        fail(Error, `execution.start(jobRunner) was already called${where}; a job script starts one execution once`);
      }
      if (runner !== jobRunner) {
        fail(TypeError, `execution.start() takes the global jobRunner: execution.start(jobRunner) (got ${describe(runner)})`);
      }
      const at = callerLocation();
      // Snapshot now: this is what the job is, whatever the script does afterwards.
      const fields = {};
      for (const name of EXECUTION_FIELDS) {
        fields[name] = field(record.fields[name].value, record.fields[name].at);
      }
      state.record = {
        startAt: at,
        fields,
        input:
          record.input === null
            ? null
            : {
                source: record.input.source,
                at: record.input.at,
                contentType: field(record.input.contentType.value, record.input.contentType.at),
              },
        stages: record.stages.map(({stage, at: addedAt}) => ({
          kind: stage.kind,
          className: stage.className,
          source: stage.source,
          at: addedAt,
          contentType: field(stage.contentType.value, stage.contentType.at),
          timeout: field(stage.timeout.value, stage.timeout.at),
          combine: field(stage.combine.value, stage.combine.at),
          chunks: field(stage.chunks.value, stage.chunks.at),
        })),
      };
      state.started = this;
      state.startAt = at;
      // The real SDK submits the job here; the recording one never settles.
      return new NativePromise(() => {});
    }
  }
  for (const name of EXECUTION_FIELDS) {
    defineProperty(JobExecution.prototype, name, {
      get() {
        const record = executions.get(this);
        return record ? record.fields[name].value : undefined;
      },
      set(value) {
        const record = executions.get(this);
        if (!record) fail(TypeError, `${name} can only be set on a JobExecution`);
        refuseAfterStart(`execution.${name} was set`);
        record.fields[name] = {value, at: callerLocation()};
      },
      enumerable: true,
      configurable: false,
    });
  }

  // `context` exists only while a stage function runs on a worker.
  const context = new Proxy(
    {},
    {
      get(target, property) {
        if (typeof property === 'symbol') return undefined;
        return fail(
          Error,
          `context.${property} is only available inside stage functions, not at the top level of the job script`,
        );
      },
      set(target, property) {
        return fail(Error, `context.${String(property)} cannot be set at the top level of the job script`);
      },
      has() {
        return fail(Error, 'context is only available inside stage functions, not at the top level of the job script');
      },
    },
  );

  function noTimers(name) {
    return function () {
      fail(
        Error,
        `${name} is not available at the top level of the job script; ` +
          'the script must set up the execution and call execution.start(jobRunner) synchronously',
      );
    };
  }

  const globals = {
    JobExecution,
    MapStage,
    ReduceStage,
    jobRunner,
    context,
    setTimeout: noTimers('setTimeout'),
    setInterval: noTimers('setInterval'),
    clearTimeout() {},
    clearInterval() {},
  };
  // Plain assignment: mini-racer declares setTimeout and clearTimeout with `var` (not configurable).
  for (const name of objectKeys(globals)) globalThis[name] = globals[name];

  return {
    run(source) {
      // Indirect eval: global code in sloppy mode, as a classic <script>; its completion value
      // is dropped here rather than converted for Python.
      globalEval(source + '\n//# sourceURL=' + JOB_FILE);
    },
    collect() {
      return stringify({started: state.record !== null, record: state.record});
    },
  };
})();
//# sourceURL=peermr-sdk.js
