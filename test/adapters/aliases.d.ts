// `express4` and `koa2` are npm aliases of express@4 and koa@2 installed for these tests;
// they answer to the same types as the current majors.
declare module 'express4' {
  import express from 'express';
  export default express;
}
declare module 'koa2' {
  import Koa from 'koa';
  export default Koa;
}
