/** UTC calendar helpers for day- and hour-scoped counters. */
export const HOUR_MS = 3_600_000;
export const DAY_MS = 86_400_000;

export const utcDayStart = (t: number): number => Math.floor(t / DAY_MS) * DAY_MS;
export const utcHourStart = (t: number): number => Math.floor(t / HOUR_MS) * HOUR_MS;

// Formatting a date costs more than the rest of a counter key; every job of the same hour shares one.
let dayCache = { start: NaN, stamp: '' };
let hourCache = { start: NaN, stamp: '' };

/** `YYYYMMDD` of the UTC day. */
export function dayStamp(t: number): string {
  const start = utcDayStart(t);
  if (start !== dayCache.start) dayCache = { start, stamp: new Date(start).toISOString().slice(0, 10).replace(/-/g, '') };
  return dayCache.stamp;
}

/** `YYYYMMDDHH` of the UTC hour. */
export function hourStamp(t: number): string {
  const start = utcHourStart(t);
  if (start !== hourCache.start) hourCache = { start, stamp: new Date(start).toISOString().slice(0, 13).replace(/[-T]/g, '') };
  return hourCache.stamp;
}
