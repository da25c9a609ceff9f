// Courtesy on the employee's machine: how much of it this tab may use, and when it must not work.
// The admin sets the share of the cores and the working hours (Admin → Settings); the employee may
// lower the share on this page (kept in this browser). The tab runs at most floor(share × cores)
// tasks at once (at least one) and says so in its hello; it pauses on battery (Battery Status API),
// under serious or critical CPU pressure (Compute Pressure API) and outside the hours, where the
// browser has these APIs. docs/architecture.md, "Worker courtesy".
const SHARE_KEY = 'peermr-core-share';
const HOURS_CHECK_MS = 30_000;

const minutes = hhmm => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

export class Courtesy {
  // adminShare in (0, 1]; hoursFrom and hoursTo "HH:MM" (both empty: any time); onChange(): called
  // when the capacity, the power source, the pressure or the hours change.
  constructor({adminShare, hoursFrom = '', hoursTo = '', onChange = () => {}}) {
    this.adminShare = adminShare > 0 && adminShare <= 1 ? adminShare : 0.5;
    this.hoursFrom = hoursFrom;
    this.hoursTo = hoursTo;
    this.onChange = onChange;
    this.power = 'unknown';      // plugged, battery, unknown
    this.pressure = 'unknown';   // nominal, fair, serious, critical, unknown
    this.outsideHours = false;
    this.busy = false;           // a task runs here: the pressure is then partly its own
  }

  get cores() { return navigator.hardwareConcurrency || 1; }

  // The employee's share if lower than the admin's.
  get share() {
    const own = Number(localStorage.getItem(SHARE_KEY));
    return own > 0 && own < this.adminShare ? own : this.adminShare;
  }

  setShare(share) {
    localStorage.setItem(SHARE_KEY, String(Math.min(share, this.adminShare)));
    this.onChange();
  }

  get capacity() { return Math.max(1, Math.floor(this.share * this.cores)); }

  // Why the tab must not take tasks now, in plain words; '' when it may.
  get pauseReason() {
    if (this.power === 'battery') return 'this computer is on battery';
    // The tab's own task raises the pressure: it finishes, and the pressure counts once the tab is idle.
    if (!this.busy && (this.pressure === 'serious' || this.pressure === 'critical')) {
      return `this computer is busy (${this.pressure} CPU pressure)`;
    }
    if (this.outsideHours) return `outside the working hours (${this.hoursFrom}–${this.hoursTo})`;
    return '';
  }

  async start() {
    await Promise.all([this.watchBattery(), this.watchPressure()]);
    if (this.hoursFrom && this.hoursTo) {
      this.checkHours();
      setInterval(() => this.checkHours(), HOURS_CHECK_MS);
    }
  }

  async watchBattery() {
    if (!navigator.getBattery) return;
    try {
      const battery = await navigator.getBattery();
      const update = () => {
        this.power = battery.charging ? 'plugged' : 'battery';
        this.onChange();
      };
      battery.addEventListener('chargingchange', update);
      update();
    } catch { /* no battery information: work as if plugged in */ }
  }

  async watchPressure() {
    if (!('PressureObserver' in globalThis)) return;
    try {
      const observer = new PressureObserver(records => {
        this.pressure = records[records.length - 1].state;
        this.onChange();
      });
      await observer.observe('cpu', {sampleInterval: 1000});
    } catch { /* the CPU source is not available here */ }
  }

  checkHours() {
    const now = new Date();
    const t = now.getHours() * 60 + now.getMinutes();
    const from = minutes(this.hoursFrom), to = minutes(this.hoursTo);
    // Hours may wrap past midnight (18:00–08:00).
    const inside = from < to ? t >= from && t < to : t >= from || t < to;
    if (this.outsideHours !== !inside) {
      this.outsideHours = !inside;
      this.onChange();
    }
  }
}
