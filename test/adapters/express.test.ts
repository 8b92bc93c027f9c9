import express from 'express';
import { conformance } from './conformance.js';
import { expressSpecifics } from './express-specifics.js';

await conformance('express');
expressSpecifics('express 5', express);
