// The part of autocannon's API the benchmarks use (the package ships no types).
declare module "autocannon" {
  namespace autocannon {
    interface Options {
      url: string;
      connections?: number;
      duration?: number;
      overallRate?: number;
      headers?: Record<string, string>;
    }
    interface Histogram {
      average: number;
      p50: number;
      p90: number;
      p99: number;
      max: number;
    }
    interface Result {
      latency: Histogram;
      requests: Histogram & { total: number };
      non2xx: number;
      errors: number;
      timeouts: number;
    }
  }
  function autocannon(options: autocannon.Options): Promise<autocannon.Result>;
  export default autocannon;
}
