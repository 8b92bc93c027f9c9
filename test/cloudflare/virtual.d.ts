/** Generated into the harness bundle by the test that builds it (./conformance.ts): the scenarios' function options. */
declare module 'virtual:scenario-functions' {
  const functions: Array<(...args: never[]) => unknown>;
  export default functions;
}
