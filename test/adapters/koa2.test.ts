import Koa from 'koa2';
import { conformance } from './conformance.js';
import { koaSpecifics } from './koa-specifics.js';

await conformance('koa2');
koaSpecifics('koa 2', Koa, 2);
