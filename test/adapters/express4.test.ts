import express from 'express4';
import { conformance } from './conformance.js';
import { expressSpecifics } from './express-specifics.js';

await conformance('express4');
expressSpecifics('express 4', express);
